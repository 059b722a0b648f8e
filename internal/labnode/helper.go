package labnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// helperEnv carries a helperSpec (JSON) to the re-executed binary. A process is a container or
// an exec by being started as `<this binary> <argv...>` with this variable set: the helper enters
// the pod's namespaces and then execs argv itself, so the process the node watches is argv's.
const helperEnv = "VPCGW_LABNODE_HELPER"

// helperSpec says where a container process runs.
type helperSpec struct {
	// Netns is the pod's network namespace (a name under /run/netns).
	Netns string `json:"netns"`
	// Root, when set, is an empty directory where the helper builds the container's root: the
	// host's top-level directories bound in, /etc bound from Etc (the pod's own overlay of the
	// host's /etc), and /kube-ovn/nat-gateway.sh bound from Script.
	Root   string `json:"root,omitempty"`
	Etc    string `json:"etc,omitempty"`
	Script string `json:"script,omitempty"`
	// Run is the container's own /run: an empty directory per container start, as the writable
	// layer of a real container starts afresh when the container restarts (what vpcgw's
	// controller copies there is gone then, as in a cluster).
	Run string `json:"run,omitempty"`
	// Busybox, when set, is the host's busybox: the base tools of kube-ovn's Alpine image
	// (busyboxApplets) come from it, ahead of the host's on the PATH (/usr/local/bin).
	Busybox string `json:"busybox,omitempty"`
	// Hostname, when set, is the name the container's UTS namespace of its own gives it: the
	// Pod's name, as a runtime sets a Pod sandbox's (uname, os.Hostname). "": the host's (a
	// hostNetwork Pod, and the lab's host-filesystem containers).
	Hostname string `json:"hostname,omitempty"`
	// WorkingDir is the container's working directory ("" is /).
	WorkingDir string `json:"workingDir,omitempty"`

	// Image, when set, is the unpacked root filesystem of the container's image (image.go): the
	// container's root is an overlay of it with Upper as its writable layer (Work is overlayfs's
	// work directory), with /proc, /sys, a minimal /dev, the kubelet-managed files (Files:
	// /etc/hosts, /etc/hostname, /etc/resolv.conf) and the volumes (Mounts) on top. Root is the
	// mount point.
	Image        string      `json:"image,omitempty"`
	Upper        string      `json:"upper,omitempty"`
	Work         string      `json:"work,omitempty"`
	Files        []mountSpec `json:"files,omitempty"`
	Mounts       []mountSpec `json:"mounts,omitempty"`
	ReadOnlyRoot bool        `json:"readOnlyRoot,omitempty"`
	// User, when set, is who the container's process runs as (securityContext or the image's
	// User); nil is root.
	User *processUser `json:"user,omitempty"`
	// JoinMountsOf, for an exec into a container of an image, is the container's process: the
	// exec joins its mount namespace and its root (Root) instead of building one.
	JoinMountsOf int `json:"joinMountsOf,omitempty"`
	// StartedFD, for a container's first process, is the inherited file descriptor the helper
	// keeps until it execs the program (made close-on-exec).
	StartedFD int `json:"startedFD,omitempty"`
}

// processUser is a container process's identity.
type processUser struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// devices are the device nodes a container runtime gives every container's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// busyboxApplets are base tools that kube-ovn's vpc-nat-gateway image (alpine with bash,
// iproute2, iptables, iputils, tcpdump, conntrack-tools) has from busybox: among them everything
// vpcgw's controller runs in the gateway container to deliver the agent, so that the lab runs
// the same implementations a cluster does.
var busyboxApplets = []string{"cat", "chmod", "cp", "dd", "ls", "mkdir", "mv", "readlink", "rm", "sha256sum", "uname"}

// kubeOVNScriptPath is where kube-ovn's vpc-nat-gateway image has its script.
const kubeOVNScriptPath = "/kube-ovn/nat-gateway.sh"

// MaybeRunExecHelper runs the node's exec helper when this process was started as one, and then
// never returns (it execs the container's argv, or exits 127 with the reason on stderr). It
// returns false at once otherwise. Binaries that host a Node (the test binary's TestMain, vpcgw-lab's
// main) call it before anything else.
func MaybeRunExecHelper() bool {
	raw, ok := os.LookupEnv(helperEnv)
	if !ok {
		return false
	}
	if err := runHelper(raw, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "labnode: %v\n", err)
		os.Exit(127)
	}
	return true // not reached: runHelper execs or fails
}

func runHelper(raw string, argv []string) error {
	var spec helperSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("bad %s: %w", helperEnv, err)
	}
	if len(argv) == 0 {
		return errors.New("no command given")
	}
	if spec.StartedFD > 0 {
		// Closed by the exec below: the node learns that the program runs (container.go).
		syscall.CloseOnExec(spec.StartedFD)
	}
	// Namespaces and the root directory belong to a thread; the exec below replaces the whole
	// process with this thread, so everything done here is what the program starts with.
	runtime.LockOSThread()
	// CLONE_NEWNS also unshares this thread's filesystem attributes from the Go runtime's other
	// threads, so the mounts and the chroot below are private to the container.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if spec.Hostname != "" {
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			return fmt.Errorf("unshare UTS namespace: %w", err)
		}
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("setting the hostname %q: %w", spec.Hostname, err)
		}
	}
	// No network namespace: a hostNetwork Pod's processes stay in the node's.
	if spec.Netns != "" {
		nsFile, err := os.Open(filepath.Join("/run/netns", spec.Netns))
		if err != nil {
			return fmt.Errorf("opening network namespace: %w", err)
		}
		if err := unix.Setns(int(nsFile.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering network namespace %s: %w", spec.Netns, err)
		}
		_ = nsFile.Close()
	}
	switch {
	case spec.JoinMountsOf != 0:
		mnt, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", spec.JoinMountsOf))
		if err != nil {
			return fmt.Errorf("the container's mount namespace: %w", err)
		}
		err = unix.Setns(int(mnt.Fd()), unix.CLONE_NEWNS)
		_ = mnt.Close()
		if err != nil {
			return fmt.Errorf("entering the container's mount namespace: %w", err)
		}
		if err := unix.Chroot(spec.Root); err != nil {
			return fmt.Errorf("chroot %s: %w", spec.Root, err)
		}
	case spec.Image != "":
		if err := buildImageRoot(spec); err != nil {
			return err
		}
		if err := unix.Chroot(spec.Root); err != nil {
			return fmt.Errorf("chroot %s: %w", spec.Root, err)
		}
	case spec.Root == "" && spec.Netns == "":
		// The host's filesystem and network: nothing to change.
	case spec.Root == "":
		// As `ip netns exec` does: a sysfs of the pod's network namespace, so that tools reading
		// /sys/class/net see the pod's interfaces.
		if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting /sys: %w", err)
		}
		if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
			return fmt.Errorf("mounting sysfs: %w", err)
		}
	default:
		if err := buildRoot(spec); err != nil {
			return err
		}
		if err := unix.Chroot(spec.Root); err != nil {
			return fmt.Errorf("chroot %s: %w", spec.Root, err)
		}
	}
	wd := spec.WorkingDir
	if wd == "" {
		wd = "/"
	}
	if err := os.Chdir(wd); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, helperEnv+"=") {
			env = append(env, kv)
		}
	}
	// The container's PATH (in env) decides what argv[0] is, as a runtime resolves it in the image.
	path := argv[0]
	if !strings.Contains(path, "/") {
		var err error
		if path, err = exec.LookPath(argv[0]); err != nil {
			return fmt.Errorf("executable %q not found in $PATH: %w", argv[0], err)
		}
	}
	// Last, as a runtime does: everything above needs root. Go's Setuid and Setgid change every
	// thread of the process.
	if u := spec.User; u != nil {
		groups := make([]int, 0, len(u.Groups))
		for _, g := range u.Groups {
			groups = append(groups, int(g))
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups %v: %w", u.Groups, err)
		}
		if err := syscall.Setgid(int(u.GID)); err != nil {
			return fmt.Errorf("setgid %d: %w", u.GID, err)
		}
		if err := syscall.Setuid(int(u.UID)); err != nil {
			return fmt.Errorf("setuid %d: %w", u.UID, err)
		}
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// buildRoot makes spec.Root the root of a vpc-nat-gateway container: the host's filesystem
// plays the image, plus kube-ovn's script at /kube-ovn/nat-gateway.sh, a private /etc (the
// script writes /etc/kube-ovn/nat-gateway.env and reads it on later calls) and a /run of the
// container's own. The image's tools are the host's (busybox's on kube-ovn's Alpine image); no
// vpcgw binary is among them.
func buildRoot(spec helperSpec) error {
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the container root: %w", err)
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		src, dst := "/"+name, filepath.Join(root, name)
		switch {
		case name == "proc" || name == "sys" || name == "etc" || name == "kube-ovn" || name == "run" && spec.Run != "":
			continue
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		case e.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
		default:
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return err
			}
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", src, err)
		}
	}
	for _, d := range []string{"proc", "sys", "etc", "kube-ovn"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting proc: %w", err)
	}
	if err := unix.Mount("sysfs", filepath.Join(root, "sys"), "sysfs", 0, ""); err != nil {
		return fmt.Errorf("mounting sysfs: %w", err)
	}
	if err := unix.Mount(spec.Etc, filepath.Join(root, "etc"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding the pod's /etc %s: %w", spec.Etc, err)
	}
	if spec.Run != "" {
		if err := os.Mkdir(filepath.Join(root, "run"), 0o755); err != nil {
			return err
		}
		if err := unix.Mount(spec.Run, filepath.Join(root, "run"), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding the container's /run %s: %w", spec.Run, err)
		}
	}
	if spec.Busybox != "" {
		bin := filepath.Join(root, "usr/local/bin")
		if err := unix.Mount("tmpfs", bin, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting the image's /usr/local/bin: %w", err)
		}
		for _, applet := range busyboxApplets {
			if err := os.Symlink(spec.Busybox, filepath.Join(bin, applet)); err != nil {
				return err
			}
		}
	}
	script := filepath.Join(root, kubeOVNScriptPath)
	if err := os.WriteFile(script, nil, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(spec.Script, script, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s: %w", spec.Script, err)
	}
	return nil
}

// buildImageRoot makes spec.Root the root of a container of an image: an overlay of the image's
// root with the container's writable layer, the kernel filesystems, a /dev of the usual device
// nodes, the kubelet-managed files and the volumes, each at a path that stays inside the root.
func buildImageRoot(spec helperSpec) error {
	root := spec.Root
	opts := "lowerdir=" + spec.Image + ",upperdir=" + spec.Upper + ",workdir=" + spec.Work
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the container root (%s): %w", opts, err)
	}
	for _, m := range []struct{ dir, fstype, opts string }{
		{"proc", "proc", ""}, {"sys", "sysfs", ""}, {"dev", "tmpfs", "mode=0755"},
	} {
		dst, err := inRoot(root, m.dir, true)
		if err != nil {
			return err
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if m.fstype == "tmpfs" {
			flags = unix.MS_NOSUID
		}
		if err := unix.Mount(m.fstype, dst, m.fstype, flags, m.opts); err != nil {
			return fmt.Errorf("mounting %s on /%s: %w", m.fstype, m.dir, err)
		}
	}
	for _, d := range devices {
		if err := bindInto(root, mountSpec{Source: "/dev/" + d, Target: "/dev/" + d}); err != nil {
			return err
		}
	}
	shm, err := inRoot(root, "dev/shm", true)
	if err != nil {
		return err
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for _, m := range append(append([]mountSpec(nil), spec.Files...), spec.Mounts...) {
		if err := bindInto(root, m); err != nil {
			return err
		}
	}
	if spec.ReadOnlyRoot {
		if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making the root read-only: %w", err)
		}
	}
	return nil
}

// bindInto binds m.Source at m.Target inside root (a file or a directory, made if missing),
// read-only when m says so.
func bindInto(root string, m mountSpec) error {
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount %s: %w", m.Target, err)
	}
	dst, err := inRoot(root, m.Target, fi.IsDir())
	if err != nil {
		return err
	}
	if err := unix.Mount(m.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// inRoot returns the host path of the container path p under root, creating it (a directory,
// or an empty file when dir is false) and its parents when missing. No element of p may be a
// symlink: a container's image must not point a mount out of its root.
func inRoot(root, p string, dir bool) (string, error) {
	clean := filepath.Clean("/" + p)
	if clean == "/" {
		return root, nil
	}
	cur := root
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		last := i == len(parts)-1
		fi, err := os.Lstat(cur)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return "", fmt.Errorf("mount path %s: %s is a symlink in the image", clean, "/"+filepath.Join(parts[:i+1]...))
		case err == nil:
			continue
		case !errors.Is(err, os.ErrNotExist):
			return "", err
		case !last || dir:
			if err := os.Mkdir(cur, 0o755); err != nil {
				return "", err
			}
		default:
			if err := os.WriteFile(cur, nil, 0o644); err != nil {
				return "", err
			}
		}
	}
	return cur, nil
}
