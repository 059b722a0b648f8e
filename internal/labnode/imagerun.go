package labnode

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// How a container of a pulled image runs (SPEC O1): its process, environment, user and root
// come from the image and the Pod spec as a kubelet and a CRI runtime combine them. Containers of
// other images keep the host's filesystem as their image (labnode.go).

// imageFor returns the pulled image of ref, or nil when the node's images do not serve its
// repository (the host's filesystem plays the image then).
func (n *Node) imageFor(ref string) (*pulledImage, error) {
	if !n.images.has(ref) {
		return nil, nil
	}
	return n.images.pull(ref)
}

// needsVolumes reports whether the Pod's volumes are prepared: when one of its containers runs
// from a pulled image. The host-filesystem containers of the lab's own Pods (kube-ovn's gateway,
// the demo) never mounted volumes, and still do not.
func (n *Node) needsVolumes(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if n.images.has(c.Image) {
			return true
		}
	}
	return false
}

// prepareVolumes writes the Pod's volumes; a failure (a Secret not there yet) is retried on the
// next step, the containers waiting meanwhile, as a kubelet's MountVolume.SetUp retries.
func (w *podWorker) prepareVolumes(pod *corev1.Pod) {
	dir := filepath.Join(w.stateDir(), "volumes")
	vols, err := prepareVolumes(w.n.ctx, w.n.cs, pod, dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := "MountVolume.SetUp failed: " + err.Error(); w.sandboxErr != msg {
			w.sandboxErr = msg
			w.log.Error(err, "pod volumes not ready (retrying)")
		}
		return
	}
	w.volumes, w.sandboxErr = vols, ""
}

// imageArgv is what a CRI runtime runs: the container's command replaces the image's
// entrypoint (and then the image's Cmd is not used), its args replace the image's Cmd; $(VAR)
// references in command and args are expanded, as by the kubelet.
func imageArgv(c *corev1.Container, img *pulledImage, vars map[string]string) []string {
	var argv []string
	switch {
	case len(c.Command) > 0:
		for _, a := range c.Command {
			argv = append(argv, expand(a, vars))
		}
		for _, a := range c.Args {
			argv = append(argv, expand(a, vars))
		}
	case len(c.Args) > 0:
		argv = append(argv, img.Config.Entrypoint...)
		for _, a := range c.Args {
			argv = append(argv, expand(a, vars))
		}
	default:
		argv = append(append(argv, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	return argv
}

// containerUser is who a container's process runs as: runAsUser and runAsGroup of the
// container's securityContext, else of the Pod's, else the image's User (uid, uid:gid, or names
// from the image's /etc/passwd and /etc/group); supplementalGroups and fsGroup are added. With
// runAsNonRoot, a root user is refused, as the kubelet refuses it.
func containerUser(pod *corev1.Pod, c *corev1.Container, img *pulledImage) (*processUser, error) {
	var uid, gid *int64
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	u := processUser{}
	imageUser, imageGroup, _ := strings.Cut(img.Config.User, ":")
	switch {
	case uid != nil:
		u.UID = uint32(*uid)
		if g, ok := primaryGroup(img.Rootfs, u.UID); ok {
			u.GID = g
		}
	case imageUser != "":
		id, g, err := lookupUser(img.Rootfs, imageUser)
		if err != nil {
			return nil, fmt.Errorf("the image's user %q: %w", img.Config.User, err)
		}
		u.UID, u.GID = id, g
	}
	switch {
	case gid != nil:
		u.GID = uint32(*gid)
	case imageGroup != "":
		g, err := lookupGroup(img.Rootfs, imageGroup)
		if err != nil {
			return nil, fmt.Errorf("the image's user %q: %w", img.Config.User, err)
		}
		u.GID = g
	}
	if nonRoot != nil && *nonRoot && u.UID == 0 {
		if uid == nil && imageUser != "" && !isNumeric(imageUser) {
			return nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", imageUser)
		}
		return nil, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		for _, g := range psc.SupplementalGroups {
			u.Groups = append(u.Groups, uint32(g))
		}
		if psc.FSGroup != nil {
			u.Groups = append(u.Groups, uint32(*psc.FSGroup))
		}
	}
	return &u, nil
}

func isNumeric(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// lookupUser resolves a user name or uid in the image's /etc/passwd: its uid and primary gid. A
// numeric uid not in the file runs with gid 0, as runc does.
func lookupUser(rootfs, name string) (uid, gid uint32, err error) {
	if n, perr := strconv.ParseUint(name, 10, 32); perr == nil {
		g, _ := primaryGroup(rootfs, uint32(n))
		return uint32(n), g, nil
	}
	var found bool
	err = scanColonFile(filepath.Join(rootfs, "etc/passwd"), func(f []string) bool {
		if len(f) < 4 || f[0] != name {
			return false
		}
		u, e1 := strconv.ParseUint(f[2], 10, 32)
		g, e2 := strconv.ParseUint(f[3], 10, 32)
		if e1 != nil || e2 != nil {
			return false
		}
		uid, gid, found = uint32(u), uint32(g), true
		return true
	})
	if err == nil && !found {
		err = fmt.Errorf("no user %q in the image's /etc/passwd", name)
	}
	return uid, gid, err
}

// primaryGroup is uid's primary gid in the image's /etc/passwd.
func primaryGroup(rootfs string, uid uint32) (uint32, bool) {
	var gid uint32
	var found bool
	_ = scanColonFile(filepath.Join(rootfs, "etc/passwd"), func(f []string) bool {
		if len(f) < 4 || f[2] != strconv.FormatUint(uint64(uid), 10) {
			return false
		}
		g, err := strconv.ParseUint(f[3], 10, 32)
		if err != nil {
			return false
		}
		gid, found = uint32(g), true
		return true
	})
	return gid, found
}

func lookupGroup(rootfs, name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	var gid uint32
	var found bool
	err := scanColonFile(filepath.Join(rootfs, "etc/group"), func(f []string) bool {
		if len(f) < 3 || f[0] != name {
			return false
		}
		g, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return false
		}
		gid, found = uint32(g), true
		return true
	})
	if err == nil && !found {
		err = fmt.Errorf("no group %q in the image's /etc/group", name)
	}
	return gid, err
}

// scanColonFile calls match with the fields of each line of an /etc/passwd-like file until it
// returns true. A missing file matches nothing.
func scanColonFile(path string, match func([]string) bool) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if match(strings.Split(sc.Text(), ":")) {
			return nil
		}
	}
	return sc.Err()
}

// imageHelperSpec is where a container of a pulled image runs: a fresh writable layer over the
// image's root (a restarted container starts afresh, as a runtime's new container does), the
// Pod's network namespace (none for hostNetwork), the kubelet-managed files, the volumes, the
// user.
func (w *podWorker) imageHelperSpec(pod *corev1.Pod, c *corev1.Container, img *pulledImage) (helperSpec, error) {
	w.mu.Lock()
	netns, dir, vols := w.netns, w.dir, w.volumes
	w.mu.Unlock()
	base, err := os.MkdirTemp(dir, c.Name+"-")
	if err != nil {
		return helperSpec{}, err
	}
	spec := helperSpec{Netns: netns, Image: img.Rootfs, Root: filepath.Join(base, "root"), Upper: filepath.Join(base, "upper"),
		Work: filepath.Join(base, "work"), WorkingDir: c.WorkingDir}
	if spec.WorkingDir == "" {
		spec.WorkingDir = img.Config.WorkingDir
	}
	if !pod.Spec.HostNetwork {
		spec.Hostname = pod.Name
	}
	for _, d := range []string{spec.Root, spec.Upper, spec.Work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return helperSpec{}, err
		}
	}
	if spec.Files, err = w.managedFiles(pod); err != nil {
		return helperSpec{}, err
	}
	if spec.Mounts, err = volumeMounts(c, vols); err != nil {
		return helperSpec{}, err
	}
	if spec.User, err = containerUser(pod, c, img); err != nil {
		return helperSpec{}, err
	}
	if sc := c.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil {
		spec.ReadOnlyRoot = *sc.ReadOnlyRootFilesystem
	}
	return spec, nil
}

// managedFiles are the files the kubelet writes for every container: /etc/hosts (the host's for
// a hostNetwork Pod, else localhost and the Pod's own name), /etc/hostname, and /etc/resolv.conf
// (the host's: the lab runs no cluster DNS).
func (w *podWorker) managedFiles(pod *corev1.Pod) ([]mountSpec, error) {
	dir := filepath.Join(w.stateDir(), "etc-hosts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hosts := filepath.Join(dir, "hosts")
	content := []byte("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if pod.Spec.HostNetwork {
		// A copy of the host's, as the kubelet makes it: the container must not edit the host's.
		host, err := os.ReadFile("/etc/hosts")
		if err != nil {
			return nil, err
		}
		content = host
	} else if ips := w.podIPs(); len(ips) > 0 {
		content = append(content, ips[0]+"\t"+pod.Name+"\n"...)
	}
	if err := os.WriteFile(hosts, content, 0o644); err != nil {
		return nil, err
	}
	hostname := filepath.Join(dir, "hostname")
	name := pod.Name
	if pod.Spec.HostNetwork {
		if h, err := os.Hostname(); err == nil {
			name = h
		}
	}
	if err := os.WriteFile(hostname, []byte(name+"\n"), 0o644); err != nil {
		return nil, err
	}
	return []mountSpec{
		{Source: hosts, Target: "/etc/hosts"},
		{Source: hostname, Target: "/etc/hostname"},
		{Source: "/etc/resolv.conf", Target: "/etc/resolv.conf", ReadOnly: true},
	}, nil
}

// AddImages makes more images the node's (see Config.Images): Pods created after this call may
// use them.
func (n *Node) AddImages(layouts map[string]string) { n.images.add(layouts) }
