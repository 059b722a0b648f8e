package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Paths the handlers are served at; deploy/webhook's ValidatingWebhookConfiguration uses them.
const (
	PathService = "/validate-service"
	PathRecord  = "/validate-iptables-dnat-rule"
	// PathServiceRecord serves vpcgw.io ServiceRecords (SPEC W4).
	PathServiceRecord = "/validate-service-record"
	PathEIP           = "/validate-iptables-eip"
	PathGateway       = "/validate-vpc-nat-gateway"
)

// Field indexes the handlers list Services by; IndexFields registers them.
const (
	// IndexServiceGateway indexes Services by their ovn.kubernetes.io/vpc_nat_gw annotation.
	IndexServiceGateway = "vpcgw.webhook.gateway"
	// IndexServiceEIP indexes Services by "<gateway>/<eip>" of their annotations (both set).
	IndexServiceEIP = "vpcgw.webhook.gateway-eip"
	// IndexNatRuleEIP indexes kube-ovn's own NAT rules (IptablesDnatRules that are not records,
	// IptablesFIPRules) by the EIP they name: a claim check reads those of one EIP (SPEC N3).
	IndexNatRuleEIP = "vpcgw.webhook.nat-eip"
)

func serviceEIPKey(gateway, eip string) string { return gateway + "/" + eip }

// IndexFields registers the Service indexes the handlers need on a cache's indexer. Call it
// before the cache starts.
func IndexFields(ctx context.Context, ix client.FieldIndexer) error {
	if err := ix.IndexField(ctx, &corev1.Service{}, IndexServiceGateway, func(o client.Object) []string {
		if gw := o.GetAnnotations()[model.AnnotationGateway]; gw != "" {
			return []string{gw}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Services by gateway: %w", err)
	}
	if err := ix.IndexField(ctx, &corev1.Service{}, IndexServiceEIP, func(o client.Object) []string {
		a := o.GetAnnotations()
		if gw, eip := a[model.AnnotationGateway], a[model.AnnotationEIP]; gw != "" && eip != "" {
			return []string{serviceEIPKey(gw, eip)}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Services by gateway and EIP: %w", err)
	}
	if err := ix.IndexField(ctx, &kubeovnv1.IptablesDnatRule{}, IndexNatRuleEIP, func(o client.Object) []string {
		if r, ok := o.(*kubeovnv1.IptablesDnatRule); ok && !model.IsRecord(r) && r.Spec.EIP != "" {
			return []string{r.Spec.EIP}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing kube-ovn's DNAT rules by EIP: %w", err)
	}
	if err := ix.IndexField(ctx, &kubeovnv1.IptablesFIPRule{}, IndexNatRuleEIP, func(o client.Object) []string {
		if r, ok := o.(*kubeovnv1.IptablesFIPRule); ok && r.Spec.EIP != "" {
			return []string{r.Spec.EIP}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing kube-ovn's floating IPs by EIP: %w", err)
	}
	return nil
}

// Handlers are the four admission handlers. Reader must support the IndexFields indexes and
// hold Services, the records and kube-ovn's own NAT rules (see CacheOptions).
type Handlers struct {
	Reader client.Reader
	// ControllerUser is the user name of the controller's identity (W4).
	ControllerUser string
	// KubeOVNUser is kube-ovn-controller's user name: every request it makes is admitted, so that
	// vpcgw never blocks kube-ovn's own operations (SPEC K7). Empty: nobody is exempt.
	KubeOVNUser string
	// MaxPortsPerService is the controller's --max-ports-per-service (0: the model's default).
	MaxPortsPerService int
	decoder            admission.Decoder
}

// NewHandlers returns the handlers decoding with scheme (it must know core/v1 and kubeovn.io/v1).
func NewHandlers(reader client.Reader, scheme *runtime.Scheme, controllerUser string) *Handlers {
	return &Handlers{Reader: reader, ControllerUser: controllerUser, decoder: admission.NewDecoder(scheme)}
}

// Register serves the handlers on srv at their paths.
func (h *Handlers) Register(srv webhook.Server) {
	srv.Register(PathService, &admission.Webhook{Handler: h.exemptKubeOVN(h.Service)})
	srv.Register(PathRecord, &admission.Webhook{Handler: h.exemptKubeOVN(h.Record)})
	srv.Register(PathServiceRecord, &admission.Webhook{Handler: h.exemptKubeOVN(h.ServiceRecord)})
	srv.Register(PathEIP, &admission.Webhook{Handler: h.exemptKubeOVN(h.EIP)})
	srv.Register(PathGateway, &admission.Webhook{Handler: h.exemptKubeOVN(h.Gateway)})
}

// exemptKubeOVN admits every request of kube-ovn-controller before next sees it (SPEC K7): its
// start-up GC deletes gateways of deleted Vpcs and exits when that fails, it removes its own
// finalizers, and it updates Services with full Updates. The registration excludes it too
// (matchConditions); this holds where an older registration does not.
func (h *Handlers) exemptKubeOVN(next admission.HandlerFunc) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		if h.KubeOVNUser != "" && req.UserInfo.Username == h.KubeOVNUser {
			return admission.Allowed("kube-ovn-controller's own operation")
		}
		return next(ctx, req)
	}
}

func verdict(problems []string) admission.Response {
	if len(problems) == 0 {
		return admission.Allowed("")
	}
	return admission.Denied(strings.Join(problems, "; "))
}

// decodeOld decodes the old object of an UPDATE or DELETE (nil for CREATE).
func (h *Handlers) decodeOld(req admission.Request, into runtime.Object) (bool, error) {
	if len(req.OldObject.Raw) == 0 {
		return false, nil
	}
	return true, h.decoder.DecodeRaw(req.OldObject, into)
}

func (h *Handlers) decodeNew(req admission.Request, into runtime.Object) (bool, error) {
	if len(req.Object.Raw) == 0 {
		return false, nil
	}
	return true, h.decoder.DecodeRaw(req.Object, into)
}

// Service admits Service creates and updates (SPEC W1, W2, W3).
func (h *Handlers) Service(ctx context.Context, req admission.Request) admission.Response {
	svc, old, err := h.decodeService(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	subnets, err := h.externalIPSubnet(ctx, svc)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	// The bound first: nothing below may cost more than the bound allows (SPEC N4).
	problems, over := ValidatePortBound(old, svc, cmp.Or(h.MaxPortsPerService, model.DefaultMaxPortsPerService))
	if len(problems) > 0 {
		return verdict(problems)
	}
	if problems := ValidateService(old, svc, subnets...); len(problems) > 0 {
		return verdict(problems)
	}
	gw, vpc, problems, err := h.admittedGateway(ctx, old, svc)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(problems) > 0 {
		return verdict(problems)
	}
	gateway, eipName, ok := NeedsClaimCheck(old, svc)
	if !ok || over || gw == nil {
		// A binding kept to a gateway the namespace may no longer use: the controller serves
		// nothing of it and says so; the user may still change or clear it.
		return admission.Allowed("")
	}
	problems, err = h.claimProblems(ctx, svc, Holders{Gateway: gw, Vpc: vpc}, gateway, eipName)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return verdict(problems)
}

// decodeService returns the Service of the request and, on an update, the one it replaces (nil
// when the request carries none).
func (h *Handlers) decodeService(req admission.Request) (svc, old *corev1.Service, err error) {
	svc = &corev1.Service{}
	if ok, err := h.decodeNew(req, svc); err != nil {
		return nil, nil, fmt.Errorf("decoding the Service: %w", err)
	} else if !ok {
		return nil, nil, errors.New("the request carries no Service")
	}
	if req.Operation != admissionv1.Update {
		return svc, nil, nil
	}
	old = &corev1.Service{}
	ok, err := h.decodeOld(req, old)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding the old Service: %w", err)
	}
	if !ok {
		return svc, nil, nil
	}
	return svc, old, nil
}

// externalIPSubnet reads the Subnet a Service with a gateway names for its external IP: none when
// it names none, or one that does not exist.
func (h *Handlers) externalIPSubnet(ctx context.Context, svc *corev1.Service) ([]kubeovnv1.Subnet, error) {
	name, ok := svc.Annotations[model.AnnotationExternalIPFromSubnet]
	if !ok || name == "" || svc.Annotations[model.AnnotationGateway] == "" {
		return nil, nil
	}
	var sub kubeovnv1.Subnet
	switch err := h.Reader.Get(ctx, client.ObjectKey{Name: name}, &sub); {
	case err == nil:
		return []kubeovnv1.Subnet{sub}, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	default:
		return nil, fmt.Errorf("reading Subnet %s: %w", name, err)
	}
}

// admittedGateway reads the gateway the Service names, and its Vpc (all nil when it names none).
// Admission before existence (SPEC N1, N8): a gateway or EIP the namespace may not use is
// answered as a missing one, and nothing that depends on it is checked; problems say why a
// gateway the Service newly names is refused.
func (h *Handlers) admittedGateway(ctx context.Context, old, svc *corev1.Service) (*kubeovnv1.VpcNatGateway, *kubeovnv1.Vpc, []string, error) {
	gwName := svc.Annotations[model.AnnotationGateway]
	if gwName == "" {
		return nil, nil, nil, nil
	}
	gw, vpc, err := h.usableGateway(ctx, svc.Namespace, gwName)
	if err != nil {
		return nil, nil, nil, err
	}
	if old == nil || old.Annotations[model.AnnotationGateway] != gwName {
		if problems := ValidateServiceAdmitted(svc, gw, vpc); len(problems) > 0 {
			return gw, vpc, problems, nil
		}
	}
	return gw, vpc, nil, nil
}

// claimProblems checks what svc claims of EIP eipName of gateway against the EIP, the other
// Services on it and, for a LoadBalancer, kube-ovn's own NAT rules (SPEC N3). held carries the
// gateway and its Vpc.
func (h *Handlers) claimProblems(ctx context.Context, svc *corev1.Service, held Holders, gateway, eipName string) ([]string, error) {
	eip, err := h.admittedEIP(ctx, svc.Namespace, held.Gateway, eipName)
	if err != nil {
		return nil, err
	}
	var others corev1.ServiceList
	if err := h.Reader.List(ctx, &others, client.MatchingFields{IndexServiceEIP: serviceEIPKey(gateway, eipName)}); err != nil {
		return nil, fmt.Errorf("listing Services of EIP %s: %w", eipName, err)
	}
	held.Services = others.Items
	problems := ValidateServiceClaims(svc, eip, held)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && eip != nil {
		nat, err := h.kubeOVNNat(ctx, eipName)
		if err != nil {
			return nil, err
		}
		if why := nat.Holds(eipName, svc); why != "" {
			problems = append(problems, why)
		}
	}
	return problems, nil
}

// admittedEIP reads an EIP; nil when it does not exist or the namespace may not use it.
func (h *Handlers) admittedEIP(ctx context.Context, namespace string, gw *kubeovnv1.VpcNatGateway, name string) (*kubeovnv1.IptablesEIP, error) {
	var e kubeovnv1.IptablesEIP
	switch err := h.Reader.Get(ctx, client.ObjectKey{Name: name}, &e); {
	case err == nil:
		usable, err := h.mayUseEIP(ctx, namespace, &e, gw)
		if err != nil || !usable {
			return nil, err
		}
		return &e, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	default:
		return nil, fmt.Errorf("reading IptablesEIP %s: %w", name, err)
	}
}

// kubeOVNNat reads kube-ovn's own NAT rules on EIP eipName (SPEC N3) from the cache, through
// IndexNatRuleEIP: its DNAT rules that are not records, and its floating IPs. The controller
// checks the same again whatever the webhook answered (SPEC W7), so a rule the cache has not
// seen yet costs a clearer answer, never a wrong data path.
func (h *Handlers) kubeOVNNat(ctx context.Context, eipName string) (model.KubeOVNNat, error) {
	var dnat kubeovnv1.IptablesDnatRuleList
	if err := h.Reader.List(ctx, &dnat, client.MatchingFields{IndexNatRuleEIP: eipName}); err != nil {
		return model.KubeOVNNat{}, fmt.Errorf("listing kube-ovn's DNAT rules of EIP %s: %w", eipName, err)
	}
	var fips kubeovnv1.IptablesFIPRuleList
	if err := h.Reader.List(ctx, &fips, client.MatchingFields{IndexNatRuleEIP: eipName}); err != nil {
		return model.KubeOVNNat{}, fmt.Errorf("listing kube-ovn's floating IPs of EIP %s: %w", eipName, err)
	}
	return model.NewKubeOVNNat(dnat.Items, fips.Items), nil
}

// Record admits writes of IptablesDnatRules (SPEC W4).
func (h *Handlers) Record(_ context.Context, req admission.Request) admission.Response {
	var obj, old kubeovnv1.IptablesDnatRule
	hasNew, err := h.decodeNew(req, &obj)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the IptablesDnatRule: %w", err))
	}
	hasOld, err := h.decodeOld(req, &old)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old IptablesDnatRule: %w", err))
	}
	var o, n *kubeovnv1.IptablesDnatRule
	if hasOld {
		o = &old
	}
	if hasNew && req.Operation != admissionv1.Delete {
		n = &obj
	}
	return verdict(ValidateRecordWrite(req.Operation, req.UserInfo.Username, h.ControllerUser, o, n))
}

// vpc reads a Vpc from the cache (nil when it does not exist).
// usableGateway reads gateway name and its Vpc: nil when the gateway does not exist, is being
// deleted or does not admit namespace (SPEC N1), which are one answer (N8).
func (h *Handlers) usableGateway(ctx context.Context, namespace, name string) (*kubeovnv1.VpcNatGateway, *kubeovnv1.Vpc, error) {
	var gw kubeovnv1.VpcNatGateway
	switch err := h.Reader.Get(ctx, client.ObjectKey{Name: name}, &gw); {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading VpcNatGateway %s: %w", name, err)
	}
	vpc, err := h.vpc(ctx, gw.Spec.Vpc)
	if err != nil {
		return nil, nil, err
	}
	if gw.DeletionTimestamp != nil || !model.Admitted(namespace, &gw, vpc) {
		return nil, nil, nil
	}
	return &gw, vpc, nil
}

// mayUseEIP reports whether namespace may use eip at all: through its own gateway, admitted there
// and by the EIP's allow-list (SPEC N1). An EIP it may not use is answered as a missing one, so
// that no message tells that it exists (N8); one of another gateway the namespace may use is
// named as such (W3).
// usable is the Service's own gateway, which the namespace may use: its EIPs need no second read.
func (h *Handlers) mayUseEIP(ctx context.Context, namespace string, eip *kubeovnv1.IptablesEIP, usable *kubeovnv1.VpcNatGateway) (bool, error) {
	if eip.Spec.NatGwDp == "" || !model.EIPAdmitted(namespace, eip) {
		return false, nil
	}
	if eip.Spec.NatGwDp == usable.Name {
		return true, nil
	}
	gw, _, err := h.usableGateway(ctx, namespace, eip.Spec.NatGwDp)
	return gw != nil, err
}

func (h *Handlers) vpc(ctx context.Context, name string) (*kubeovnv1.Vpc, error) {
	var vpc kubeovnv1.Vpc
	switch err := h.Reader.Get(ctx, client.ObjectKey{Name: name}, &vpc); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Vpc %s: %w", name, err)
	}
	return &vpc, nil
}

// ServiceRecord admits writes of vpcgw.io ServiceRecords (SPEC W4): only the controller's.
func (h *Handlers) ServiceRecord(_ context.Context, req admission.Request) admission.Response {
	var rec vpcgwv1alpha1.ServiceRecord
	raw := req.Object
	if req.Operation == admissionv1.Delete || len(raw.Raw) == 0 {
		raw = req.OldObject
	}
	if len(raw.Raw) > 0 {
		if err := h.decoder.DecodeRaw(raw, &rec); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the ServiceRecord: %w", err))
		}
	}
	return verdict(ValidateServiceRecordWrite(req.Operation, req.UserInfo.Username, h.ControllerUser, req.Name, rec.Labels))
}

// EIP admits IptablesEIP deletes (SPEC W5).
func (h *Handlers) EIP(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	var eip kubeovnv1.IptablesEIP
	if ok, err := h.decodeOld(req, &eip); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the IptablesEIP: %w", err))
	} else if !ok {
		return admission.Errored(http.StatusBadRequest, errors.New("the DELETE request carries no old IptablesEIP"))
	}
	var records kubeovnv1.IptablesDnatRuleList
	if err := h.Reader.List(ctx, &records, client.MatchingLabels{model.LabelEIPUID: string(eip.UID)}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing records of IptablesEIP %s: %w", eip.Name, err))
	}
	var srs vpcgwv1alpha1.ServiceRecordList
	if err := h.Reader.List(ctx, &srs, client.MatchingLabels{model.LabelEIPUID: string(eip.UID)}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing ServiceRecords of IptablesEIP %s: %w", eip.Name, err))
	}
	return verdict(ValidateEIPDelete(&eip, records.Items, srs.Items...))
}

// Gateway admits VpcNatGateway deletes (SPEC W6).
func (h *Handlers) Gateway(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	name := req.Name
	var services corev1.ServiceList
	if err := h.Reader.List(ctx, &services, client.MatchingFields{IndexServiceGateway: name}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing Services of VpcNatGateway %s: %w", name, err))
	}
	// Only admitted bindings count (SPEC N1): annotating a Service does not let a namespace block
	// the deletion of a gateway it may not use.
	var gw kubeovnv1.VpcNatGateway
	if ok, err := h.decodeOld(req, &gw); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the VpcNatGateway: %w", err))
	} else if ok {
		vpc, err := h.vpc(ctx, gw.Spec.Vpc)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		services.Items = AdmittedServices(&gw, vpc, services.Items)
	}
	var records kubeovnv1.IptablesDnatRuleList
	if err := h.Reader.List(ctx, &records, client.MatchingLabels{model.LabelGateway: name}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing records of VpcNatGateway %s: %w", name, err))
	}
	var srs vpcgwv1alpha1.ServiceRecordList
	if err := h.Reader.List(ctx, &srs, client.MatchingLabels{model.LabelGateway: name}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing ServiceRecords of VpcNatGateway %s: %w", name, err))
	}
	return verdict(ValidateGatewayDelete(name, services.Items, records.Items, srs.Items...))
}
