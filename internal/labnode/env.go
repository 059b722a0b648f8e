package labnode

import (
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// defaultPath is the PATH of the "image" (the host filesystem) when the container sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// containerEnv resolves a container's environment as the kubelet does: HOSTNAME and PATH first,
// then env in order, each value expanded with the variables defined before it, fieldRef,
// configMapKeyRef and secretKeyRef resolved.
// A container of a pulled image starts from the image's Env instead (imageEnv), which the
// container's env overrides, as a CRI runtime merges them.
func containerEnv(ctx context.Context, cs kubernetes.Interface, services corelisters.ServiceLister, pod *corev1.Pod, c *corev1.Container, hostIP, podIP string, imageEnv []string) ([]string, map[string]string, error) {
	vars := map[string]string{"HOSTNAME": pod.Name, "PATH": defaultPath}
	order := []string{"HOSTNAME", "PATH"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	if imageEnv != nil {
		delete(vars, "PATH")
		order = []string{"HOSTNAME"}
		for _, kv := range imageEnv {
			if k, v, ok := strings.Cut(kv, "="); ok {
				set(k, v)
			}
		}
	}
	svcEnv, err := serviceEnv(services, pod)
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	for _, kv := range svcEnv {
		set(kv[0], kv[1])
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, err := envSource(ctx, cs, pod, c, e.ValueFrom, hostIP, podIP)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s env %s: %w", c.Name, e.Name, err)
		}
		set(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

func envSource(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource, hostIP, podIP string) (string, error) {
	switch {
	case src.FieldRef != nil:
		return fieldValue(pod, src.FieldRef.FieldPath, hostIP, podIP)
	case src.ResourceFieldRef != nil:
		return resourceFieldValue(pod, c, src.ResourceFieldRef)
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if ref.Optional != nil && *ref.Optional {
				return "", nil
			}
			return "", err
		}
		v, ok := cm.Data[ref.Key]
		if !ok && (ref.Optional == nil || !*ref.Optional) {
			return "", fmt.Errorf("configmap %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if ref.Optional != nil && *ref.Optional {
				return "", nil
			}
			return "", err
		}
		v, ok := s.Data[ref.Key]
		if !ok && (ref.Optional == nil || !*ref.Optional) {
			return "", fmt.Errorf("secret %s has no key %s", ref.Name, ref.Key)
		}
		return string(v), nil
	default:
		return "", fmt.Errorf("unsupported value source (the lab node resolves fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef)")
	}
}

// resourceFieldValue is the downward API's resourceFieldRef as the kubelet resolves it: the named
// container's (by default this one's) limit or request, divided by the divisor (default 1) and
// rounded up; a limit the container does not set is the node's allocatable, a request it does
// not set is 0.
func resourceFieldValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		target = nil
		for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range cs {
				if cs[i].Name == ref.ContainerName {
					target = &cs[i]
				}
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef %s: the pod has no container %q", ref.Resource, ref.ContainerName)
		}
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	var q resource.Quantity
	switch kind {
	case "limits":
		var set bool
		if q, set = target.Resources.Limits[corev1.ResourceName(name)]; !set {
			q = nodeResources()[corev1.ResourceName(name)]
		}
	case "requests":
		q = target.Resources.Requests[corev1.ResourceName(name)]
	default:
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	switch corev1.ResourceName(name) {
	case corev1.ResourceCPU:
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
}

// fieldValue is the downward API for environment variables.
func fieldValue(pod *corev1.Pod, path, hostIP, podIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if path == prefix {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			lines := make([]string, 0, len(keys))
			for _, k := range keys {
				lines = append(lines, fmt.Sprintf("%s=%q", k, m[k]))
			}
			return strings.Join(lines, "\n"), nil
		}
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expand replaces $(VAR) with the value of VAR when it is defined and leaves it as written
// otherwise; $$ is a literal $ (so "$$(VAR)" stays "$(VAR)"), as Kubernetes specifies for
// command, args and env values.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// containerArgv is command + args, expanded.
func containerArgv(c *corev1.Container, vars map[string]string) []string {
	argv := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range c.Command {
		argv = append(argv, expand(a, vars))
	}
	for _, a := range c.Args {
		argv = append(argv, expand(a, vars))
	}
	return argv
}

// serviceEnv is the kubelet's service environment (getServiceEnvVarMap, envvars.FromServices):
// for the API server's Service (default/kubernetes) always, and for every Service of the Pod's
// namespace unless enableServiceLinks is false, <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT (and
// one per named port) and the Docker link variables. Only Services with a ClusterIP count. This
// is what client-go's in-cluster configuration reads (KUBERNETES_SERVICE_HOST and _PORT).
func serviceEnv(services corelisters.ServiceLister, pod *corev1.Pod) ([][2]string, error) {
	var svcs []corev1.Service
	master, err := services.Services(metav1.NamespaceDefault).Get("kubernetes")
	switch {
	case err == nil:
		svcs = append(svcs, *master)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Service default/kubernetes for the service environment: %w", err)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		list, err := services.Services(pod.Namespace).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("listing the Services of namespace %s for the service environment: %w", pod.Namespace, err)
		}
		for _, s := range list {
			if s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes" {
				continue
			}
			svcs = append(svcs, *s)
		}
	}
	// The kubelet builds a map, so the order is irrelevant to the container; sorted here so
	// that the environment is the same at every start.
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].Name < svcs[j].Name })
	var out [][2]string
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		first := strconv.Itoa(int(s.Spec.Ports[0].Port))
		out = append(out, [2]string{prefix + "_SERVICE_HOST", ip}, [2]string{prefix + "_SERVICE_PORT", first})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, [2]string{prefix + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
			}
		}
		for i, p := range s.Spec.Ports {
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			hostPort := net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
			if i == 0 {
				out = append(out, [2]string{prefix + "_PORT", proto + "://" + hostPort})
			}
			pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
			out = append(out, [2]string{pp, proto + "://" + hostPort}, [2]string{pp + "_PROTO", proto},
				[2]string{pp + "_PORT", strconv.Itoa(int(p.Port))}, [2]string{pp + "_ADDR", ip})
		}
	}
	return out, nil
}
