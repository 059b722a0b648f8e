package labnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	kubeletexec "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"golang.org/x/sys/unix"
)

// startExecServer serves the kubelet's API the lab needs on InternalIP:<random port> over HTTPS
// with a self-signed certificate (kube-apiserver does not verify a kubelet's certificate unless
// told to): /exec, /containerLogs and /healthz.
func (n *Node) startExecServer() error {
	cert, err := selfSigned(n.cfg.NodeName, n.cfg.InternalIP.String())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.cfg.InternalIP.String(), "0"))
	if err != nil {
		return err
	}
	n.port = ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", n.serveExec)
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", n.serveExec)
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", n.serveLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	n.server = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.server.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error(err, "exec server")
		}
	}()
	return nil
}

func (n *Node) serveExec(w http.ResponseWriter, req *http.Request) {
	opts, err := kubeletexec.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, pod, container := req.PathValue("ns"), req.PathValue("pod"), req.PathValue("container")
	n.log.V(1).Info("exec", "pod", ns+"/"+pod, "container", container, "command", req.URL.Query()["command"])
	kubeletexec.ServeExec(w, req, executor{n}, ns+"/"+pod, req.PathValue("uid"), container, req.URL.Query()["command"], opts,
		time.Duration(n.idleTimeout.Load()), kubeletexec.DefaultStreamCreationTimeout, kubeletexec.SupportedStreamingProtocols)
}

// serveLogs serves what a container wrote (all of it; no follow), for `kubectl logs`.
func (n *Node) serveLogs(w http.ResponseWriter, req *http.Request) {
	n.mu.Lock()
	pw := n.byName[req.PathValue("ns")+"/"+req.PathValue("pod")]
	n.mu.Unlock()
	if pw == nil || pw.stateDir() == "" {
		http.Error(w, "pod not found on this node", http.StatusNotFound)
		return
	}
	name := req.PathValue("container")
	if pw.container(name) == nil {
		http.Error(w, "container not found", http.StatusNotFound)
		return
	}
	f, err := os.Open(filepath.Join(pw.stateDir(), filepath.Base(name)+".log"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer func() { _ = f.Close() }() // read only
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.Copy(w, f)
}

// executor is the container runtime side of exec.
type executor struct{ n *Node }

// ExecInContainer runs cmd in the container's namespaces (and, for kube-ovn's gateway image, its
// root) with the container's environment. A non-zero exit is a CodeExitError, which the streaming
// server reports as the kubelet does ("command terminated with non-zero exit code").
func (e executor) ExecInContainer(ctx context.Context, name, _ string, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan kubeletexec.TerminalSize, _ time.Duration) error {
	e.n.mu.Lock()
	w := e.n.byName[name]
	e.n.mu.Unlock()
	if w == nil {
		return fmt.Errorf("pod %s is not running on node %s", name, e.n.cfg.NodeName)
	}
	c := w.container(container)
	if c == nil {
		return fmt.Errorf("container %s not found in pod %s", container, name)
	}
	code, err := c.exec(ctx, cmd, in, out, errw, tty, resize)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q exited with %d", strings.Join(cmd, " "), code), Code: code}
	}
	return nil
}

// exec runs argv in the container and returns its exit code; err is for failing to run it.
func (c *containerRunner) exec(ctx context.Context, argv []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan kubeletexec.TerminalSize) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("no command")
	}
	hs, env, err := c.execTarget()
	if err != nil {
		return 0, err
	}
	cmd, err := helperCommand(hs, argv, env)
	if err != nil {
		return 0, err
	}
	var stdin io.WriteCloser
	var master *os.File
	if tty {
		pts, m, err := openPty()
		if err != nil {
			return 0, fmt.Errorf("allocating a tty: %w", err)
		}
		master = m
		defer func() { _ = master.Close() }() // the session is over; nothing is left to flush
		cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			_ = pts.Close()
			return 0, err
		}
		_ = pts.Close()
		forget, err := c.trackExec(cmd.Process.Pid) // Setsid: its own group
		if err != nil {
			_ = cmd.Wait()
			return 0, err
		}
		defer forget()
		if in != nil {
			go func() { _, _ = io.Copy(master, in) }()
		}
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			if out != nil {
				_, _ = io.Copy(out, master) // ends with EIO once the process and its children exit
			}
		}()
		go func() {
			for size := range resize {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
			}
		}()
		return waitExec(ctx, cmd, copied)
	}
	if out != nil {
		cmd.Stdout = out
	}
	if errw != nil {
		cmd.Stderr = errw
	}
	if in != nil {
		// Our own copy: exec.Cmd would wait for stdin's EOF, which a client need not send.
		if stdin, err = cmd.StdinPipe(); err != nil {
			return 0, err
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	forget, err := c.trackExec(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Wait()
		return 0, err
	}
	defer forget()
	if stdin != nil {
		go func() { _, _ = io.Copy(stdin, in); _ = stdin.Close() }()
	}
	return waitExec(ctx, cmd, nil)
}

// waitExec waits for the process (killing its group when ctx ends, i.e. the stream went away)
// and then for the tty output copy.
func waitExec(ctx context.Context, cmd *exec.Cmd, copied <-chan struct{}) (int, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	if copied != nil {
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return 0, werr
	}
	code, _ := exitStatus(cmd.ProcessState, werr)
	return code, nil
}

// openPty allocates a pseudo-terminal and returns its two ends (the process's, ours).
func openPty() (pts, master *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	num, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(num), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return pts, master, nil
}

// selfSigned makes the serving certificate for the node's addresses.
func selfSigned(name, ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
