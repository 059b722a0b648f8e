package kubeovnrun

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// kube-ovn-controller creates its log file in a hard-coded directory (pkg/util/log.go) and exits
// when it cannot. Rather than create that directory on the host, the controller runs in a
// private mount namespace where a directory of the run is bind-mounted there: the process
// re-executes itself as a small helper (MaybeRunMountHelper) that sets the namespace up and then
// execs the controller.
const (
	// kubeOVNLogDir is the directory kube-ovn-controller writes its log file to.
	kubeOVNLogDir = "/var/log/kube-ovn"
	// helperEnv marks the helper invocation; its value is the directory to mount.
	helperEnv = "VPCGW_KUBEOVNRUN_MOUNT_HELPER"
)

// MaybeRunMountHelper returns false at once unless this process was started by Controller as its
// mount helper. As the helper, it never returns: it enters a private mount namespace, makes the
// log directory of the run appear at kube-ovn's hard-coded log path and execs kube-ovn-controller
// with the rest of its arguments, or exits 1 with the reason on stderr. Call it first thing in
// main (or TestMain) of every binary that starts a Controller.
func MaybeRunMountHelper() bool {
	src, ok := os.LookupEnv(helperEnv)
	if !ok {
		return false
	}
	if err := runMountHelper(src, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubeovnrun mount helper:", err)
		os.Exit(1)
	}
	panic("unreachable: exec returned without error")
}

func runMountHelper(src string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command to exec")
	}
	// The mount namespace belongs to the thread that unshares; exec from that same thread.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
	}
	// Keep the mounts below out of the host's namespace (systemd makes / shared).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	target, source := kubeOVNLogDir, src
	if _, err := os.Stat(kubeOVNLogDir); err != nil {
		// No such directory on the host, and a bind mount needs an existing target: mount the
		// parent of the run's directory over /var/log instead (only in this namespace).
		if filepath.Base(src) != filepath.Base(kubeOVNLogDir) {
			return fmt.Errorf("%s does not exist and %s is not named %s", kubeOVNLogDir, src, filepath.Base(kubeOVNLogDir))
		}
		target, source = filepath.Dir(kubeOVNLogDir), filepath.Dir(src)
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on %s: %w", source, target, err)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, helperEnv+"=") {
			env = append(env, kv)
		}
	}
	return syscall.Exec(argv[0], argv, env)
}
