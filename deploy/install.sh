#!/usr/bin/env bash
# Installs (or upgrades) vpcgw: renders the Helm chart next to this script (deploy/helm/vpcgw;
# in a release directory, the packaged chart vpcgw-<version>.tgz beside it) with `helm template` and applies the result with `kubectl apply --server-side`, so running it
# again converges to the same objects (idempotent). No Helm release is created: the cluster's state
# is exactly the printed manifests, and `helm` is only a template engine here.
#
# kube-ovn must be installed first: the script refuses, creating nothing, where one of kube-ovn's
# CRDs (vpc-nat-gateways, iptables-eips, iptables-dnat-rules, iptables-fip-rules, subnets, vpcs, ips.kubeovn.io) is missing.
# It never creates, changes or deletes a kubeovn.io CRD (SPEC K1); the only CRD it applies is
# vpcgw's own, servicerecords.vpcgw.io.
#
#   deploy/install.sh [--dry-run]
#   deploy/install.sh uninstall
#
# uninstall (SPEC O4) first runs the chart's release Job (`vpcgw release` as the controller, with
# the controller's flags: the same Job helm uninstall runs as its pre-delete hook) and waits for it
# to complete; then it deletes what install applied, vpcgw's CRD included, never kube-ovn's CRDs.
# Set the same environment as for the install, so that the release sees the cluster as the
# controller did.
#
# --dry-run prints the manifests that would be applied and touches no cluster (it renders them as
# for a fresh install: vpcgw's CRD per INSTALL_CRDS, a newly generated webhook certificate; it
# cannot check for kube-ovn).
#
# Environment (all optional):
#   ENABLE_GW_NFTABLE_LB_SVC=true           --enable-gw-nftable-lb-svc (LoadBalancer through the EIP; on,
#                                           as in the chart: false beside kube-ovn's --enable-lb-svc)
#   ENABLE_GW_NFTABLE_SVC_CLUSTER_IP=false  --enable-gw-nftable-svc-cluster-ip (ClusterIPs on the gateway;
#                                           opt-in: needs ENABLE_LB=false and kube-ovn's --enable-lb=false)
#   ENABLE_LB=true                          kube-ovn's --enable-lb (must be false with the ClusterIP gate)
#   ENABLE_LB_SVC=false                     kube-ovn's --enable-lb-svc
#   NAMESPACE=vpcgw-system                  where vpcgw runs (its own namespace, created if missing)
#   EXTRA_GATEWAY_NAMESPACES=               comma-separated namespaces of gateway pods besides
#                                           KUBE_OVN_NAMESPACE (pods/exec is granted there and in
#                                           KUBE_OVN_NAMESPACE only): kube-ovn master's gateways
#                                           with spec.namespace set
#   IMAGE_REPOSITORY=ghcr.io/vpcgw/vpcgw    the vpcgw image (controller, webhook, agent builds)
#   IMAGE_TAG=<chart appVersion>            its tag (what `make images` tags a release commit with);
#                                           when no tag or digest is given (by IMAGE_TAG,
#                                           IMAGE_DIGEST, IMAGE or IMAGES_JSON), the chart's own
#                                           (a release's chart pins its image's digest)
#   IMAGE_DIGEST=                           sha256:<64 hex>: pin the image by digest (the "digest"
#                                           of vpcgw in bin/images/images.json); the tag then only
#                                           informs (<repository>:<tag>@<digest> when IMAGE_TAG is set)
#   IMAGE=                                  all three at once, <repository>[:<tag>][@<digest>],
#                                           instead of IMAGE_REPOSITORY, IMAGE_TAG and IMAGE_DIGEST
#   IMAGES_JSON=                            images.json of `make images` (bin/images/images.json):
#                                           IMAGE_TAG and IMAGE_DIGEST from its vpcgw entry (push
#                                           the layout to IMAGE_REPOSITORY first)
#   CONTROLLER_REPLICAS=1                   controller replicas (leader election is always on)
#   OVN_NB_ADDR=                            e.g. tcp:10.96.0.10:6641 (empty: no VIP routes)
#   OVN_NB_TLS_SECRET=                      Secret with cert/key/cacert for an ssl: OVN_NB_ADDR
#   ENABLE_WEBHOOK=true                     CERT_MANAGER=false (true: cert-manager issues the cert)
#   INSTALL_CRDS=true                       vpcgw's own CRD servicerecords.vpcgw.io (auto: same as true);
#                                           kube-ovn's CRDs are never installed, whatever the value
#   LEDGER=service-record                   --ledger: service-record or iptables-dnat-rule (SPEC R6)
#   KUBE_OVN_NAMESPACE=kube-system          kube-ovn's namespace (its ConfigMap ovn-vpc-nat-config)
#   KUBE_OVN_CONTROLLER_DEPLOYMENT=kube-ovn-controller
#                                           kube-ovn-controller's Deployment there: the install is
#                                           refused while its flags turn on kube-ovn's own Service
#                                           controller, and vpcgw stands aside if they do later (K10)
#   KUBE_OVN_SERVICE_ACCOUNT=system:serviceaccount:kube-system:ovn
#                                           kube-ovn-controller's user, exempt from the webhook (K7)
#   ROLLOUT_TIMEOUT=5m                      wait for the Deployments to be ready; 0: do not wait
#   HELM=helm KUBECTL=kubectl               the binaries; without helm on PATH, it is built with
#                                           hack/tools/helm/build.sh when Go is available
#
# Values reach helm through a values file, never through a shell: each is checked against a strict
# pattern first, so nothing in the environment can change what the commands do.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
chart=${CHART:-$here/helm/vpcgw}
if [ -z "${CHART:-}" ] && [ ! -d "$chart" ]; then
	# A release directory (make release): the chart is packaged beside the script.
	packaged=()
	for f in "$here"/vpcgw-[0-9]*.tgz; do [ ! -f "$f" ] || packaged+=("$f"); done
	[ "${#packaged[@]}" -eq 1 ] || { echo "install.sh: no chart: neither $chart nor one $here/vpcgw-<version>.tgz; set CHART" >&2; exit 1; }
	chart=${packaged[0]}
fi

die() { echo "install.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; }

dry_run=false
uninstall=false
for arg in "$@"; do
	case "$arg" in
	--dry-run) dry_run=true ;;
	uninstall) uninstall=true ;;
	-h | --help) usage; exit 0 ;;
	*) usage; die "unknown argument: $arg" ;;
	esac
done

ENABLE_GW_NFTABLE_LB_SVC=${ENABLE_GW_NFTABLE_LB_SVC:-true}
ENABLE_GW_NFTABLE_SVC_CLUSTER_IP=${ENABLE_GW_NFTABLE_SVC_CLUSTER_IP:-false}
ENABLE_LB=${ENABLE_LB:-true}
ENABLE_LB_SVC=${ENABLE_LB_SVC:-false}
NAMESPACE=${NAMESPACE:-vpcgw-system}
[ -z "${GATEWAY_NAMESPACES:-}" ] || die "GATEWAY_NAMESPACES is gone: pods/exec is granted in KUBE_OVN_NAMESPACE, plus EXTRA_GATEWAY_NAMESPACES (kube-ovn master's gateways with spec.namespace elsewhere)"
EXTRA_GATEWAY_NAMESPACES=${EXTRA_GATEWAY_NAMESPACES:-}
IMAGE=${IMAGE:-}
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-}
IMAGE_TAG=${IMAGE_TAG:-}
IMAGE_DIGEST=${IMAGE_DIGEST:-}
IMAGES_JSON=${IMAGES_JSON:-}
CONTROLLER_REPLICAS=${CONTROLLER_REPLICAS:-1}
OVN_NB_ADDR=${OVN_NB_ADDR:-}
OVN_NB_TLS_SECRET=${OVN_NB_TLS_SECRET:-}
ENABLE_WEBHOOK=${ENABLE_WEBHOOK:-true}
CERT_MANAGER=${CERT_MANAGER:-false}
INSTALL_CRDS=${INSTALL_CRDS:-true}
LEDGER=${LEDGER:-service-record}
KUBE_OVN_NAMESPACE=${KUBE_OVN_NAMESPACE:-kube-system}
KUBE_OVN_SERVICE_ACCOUNT=${KUBE_OVN_SERVICE_ACCOUNT:-system:serviceaccount:kube-system:ovn}
KUBE_OVN_CONTROLLER_DEPLOYMENT=${KUBE_OVN_CONTROLLER_DEPLOYMENT:-kube-ovn-controller}
ROLLOUT_TIMEOUT=${ROLLOUT_TIMEOUT:-5m}
KUBECTL=${KUBECTL:-kubectl}

# check NAME VALUE REGEX: the value must match the whole pattern.
check() { [[ $2 =~ $3 ]] || die "$1=\"$2\" is not valid (expected ${4:-a value matching $3})"; }
bool='^(true|false)$'
dns_label='^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
check ENABLE_GW_NFTABLE_LB_SVC "$ENABLE_GW_NFTABLE_LB_SVC" "$bool" "true or false"
check ENABLE_GW_NFTABLE_SVC_CLUSTER_IP "$ENABLE_GW_NFTABLE_SVC_CLUSTER_IP" "$bool" "true or false"
check ENABLE_LB "$ENABLE_LB" "$bool" "true or false"
check ENABLE_LB_SVC "$ENABLE_LB_SVC" "$bool" "true or false"
check ENABLE_WEBHOOK "$ENABLE_WEBHOOK" "$bool" "true or false"
check CERT_MANAGER "$CERT_MANAGER" "$bool" "true or false"
check INSTALL_CRDS "$INSTALL_CRDS" '^(true|false|auto)$' "true, false or auto"
check ROLLOUT_TIMEOUT "$ROLLOUT_TIMEOUT" '^(0|[1-9][0-9]*[smh])$' "0 or a duration like 90s or 5m"
check NAMESPACE "$NAMESPACE" "$dns_label" "a namespace name"
check LEDGER "$LEDGER" '^(service-record|iptables-dnat-rule)$' "service-record or iptables-dnat-rule"
check KUBE_OVN_NAMESPACE "$KUBE_OVN_NAMESPACE" "$dns_label" "a namespace name"
check KUBE_OVN_CONTROLLER_DEPLOYMENT "$KUBE_OVN_CONTROLLER_DEPLOYMENT" '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$' "a Deployment name"
check KUBE_OVN_SERVICE_ACCOUNT "$KUBE_OVN_SERVICE_ACCOUNT" '^[A-Za-z0-9][-A-Za-z0-9_.:@]*$' "a user name like system:serviceaccount:kube-system:ovn"
check CONTROLLER_REPLICAS "$CONTROLLER_REPLICAS" '^[1-9][0-9]?$' "a number from 1 to 99"
# The image: IMAGE split into its parts, or the tag and digest from images.json; checked below.
if [ -n "$IMAGE" ]; then
	[ -z "$IMAGE_REPOSITORY$IMAGE_TAG$IMAGE_DIGEST$IMAGES_JSON" ] ||
		die "IMAGE names the whole image: leave IMAGE_REPOSITORY, IMAGE_TAG, IMAGE_DIGEST and IMAGES_JSON unset with it"
	ref=$IMAGE
	if [[ $ref == *@* ]]; then IMAGE_DIGEST=${ref##*@} ref=${ref%@*}; fi
	# A tag follows the last ':' of the last path element (a registry's port is followed by '/').
	if [[ ${ref##*/} == *:* ]]; then IMAGE_TAG=${ref##*:} ref=${ref%:*}; fi
	[ -n "$ref" ] || die "IMAGE=\"$IMAGE\" has no repository (expected <repository>[:<tag>][@sha256:<digest>])"
	IMAGE_REPOSITORY=$ref
fi
if [ -n "$IMAGES_JSON" ]; then
	[ -z "$IMAGE_TAG$IMAGE_DIGEST" ] || die "IMAGES_JSON gives the tag and the digest: leave IMAGE_TAG and IMAGE_DIGEST unset with it"
	[ -f "$IMAGES_JSON" ] && [ -r "$IMAGES_JSON" ] || die "IMAGES_JSON=$IMAGES_JSON: no such file (make images writes bin/images/images.json)"
	# The vpcgw entry of the file hack/tools/images writes (json.MarshalIndent, two spaces).
	read -r IMAGE_TAG IMAGE_DIGEST < <(awk '
		/^  "vpcgw": \{/ { inside = 1; next }
		inside && /^  \}/ { inside = 0 }
		inside && /^    "tag": "/ { tag = $2 }
		inside && /^    "digest": "/ { digest = $2 }
		END { gsub(/[",]/, "", tag); gsub(/[",]/, "", digest); print tag, digest }' "$IMAGES_JSON") || true
	[ -n "$IMAGE_TAG" ] && [ -n "$IMAGE_DIGEST" ] || die "IMAGES_JSON=$IMAGES_JSON has no vpcgw image with a tag and a digest"
fi
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/vpcgw/vpcgw}
check IMAGE_REPOSITORY "$IMAGE_REPOSITORY" '^[a-z0-9]+([._-]+[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$' "an image repository"
[ -z "$IMAGE_TAG" ] || check IMAGE_TAG "$IMAGE_TAG" '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$' "an image tag"
[ -z "$IMAGE_DIGEST" ] || check IMAGE_DIGEST "$IMAGE_DIGEST" '^sha256:[a-f0-9]{64}$' "sha256:<64 hex digits>"
[ -z "$OVN_NB_ADDR" ] || check OVN_NB_ADDR "$OVN_NB_ADDR" '^(tcp|ssl):(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]+(,(tcp|ssl):(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]+)*$' "tcp:HOST:PORT or ssl:HOST:PORT, comma-separated"
[ -z "$OVN_NB_TLS_SECRET" ] || check OVN_NB_TLS_SECRET "$OVN_NB_TLS_SECRET" '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$' "a Secret name"
gateway_namespaces=()
[ -z "$EXTRA_GATEWAY_NAMESPACES" ] || IFS=, read -r -a gateway_namespaces <<<"$EXTRA_GATEWAY_NAMESPACES"
for ns in "${gateway_namespaces[@]}"; do check EXTRA_GATEWAY_NAMESPACES "$ns" "$dns_label" "comma-separated namespace names"; done

if [ -z "${HELM:-}" ]; then
	if command -v helm >/dev/null; then
		HELM=helm
	elif command -v go >/dev/null && [ -x "$here/../hack/tools/helm/build.sh" ]; then
		HELM=$("$here/../hack/tools/helm/build.sh" | tail -n 1)
	else
		die "helm not found: install it, set HELM=/path/to/helm, or run hack/tools/helm/build.sh"
	fi
fi

kube() { "$KUBECTL" "$@"; }

# auto (the old default, which decided about kube-ovn's CRDs) now means vpcgw's own CRD too.
install_crds=$INSTALL_CRDS
[ "$install_crds" != auto ] || install_crds=true
# What the chart checks itself when it renders against the cluster (below: kube-ovn's CRDs,
# cert-manager, kube-ovn's own Service controller) and keeps (the webhook's certificate of an
# earlier run, which it looks up), this script leaves to it.
[ "$dry_run" = true ] || kube version >/dev/null || die "cannot reach the cluster with $KUBECTL"

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
values=$work/values.yaml
{
	echo "features:"
	echo "  enableGwNftableLoadbalancerService: $ENABLE_GW_NFTABLE_LB_SVC"
	echo "  enableGwNftableServiceClusterIp: $ENABLE_GW_NFTABLE_SVC_CLUSTER_IP"
	echo "enableLb: $ENABLE_LB"
	echo "enableLbSvc: $ENABLE_LB_SVC"
	echo "transport: exec"
	echo "ledger: $LEDGER"
	echo "kubeOvn:"
	echo "  namespace: \"$KUBE_OVN_NAMESPACE\""
	echo "  serviceAccount: \"$KUBE_OVN_SERVICE_ACCOUNT\""
	echo "  controllerDeployment: \"$KUBE_OVN_CONTROLLER_DEPLOYMENT\""
	echo "image:"
	echo "  repository: \"$IMAGE_REPOSITORY\""
	# Asked for neither: the chart's own (a release's chart pins its image's digest).
	if [ -n "$IMAGE_TAG$IMAGE_DIGEST" ]; then
		echo "  tag: \"$IMAGE_TAG\""
		echo "  digest: \"$IMAGE_DIGEST\""
	fi
	echo "extraGatewayNamespaces:"
	for ns in "${gateway_namespaces[@]}"; do echo "  - \"$ns\""; done
	[ "${#gateway_namespaces[@]}" -gt 0 ] || echo "  []"
	echo "ovn:"
	echo "  nbAddr: \"$OVN_NB_ADDR\""
	echo "  tls:"
	echo "    secretName: \"$OVN_NB_TLS_SECRET\""
	echo "controller:"
	echo "  replicas: $CONTROLLER_REPLICAS"
	echo "webhook:"
	echo "  enabled: $ENABLE_WEBHOOK"
	echo "  certManager:"
	echo "    enabled: $CERT_MANAGER"
	echo "crds:"
	echo "  install: $install_crds"
} >"$values"

manifests=$work/vpcgw.yaml
# Against the cluster, the chart renders as helm install does (--dry-run=server: its lookups see
# the cluster), so that its refusals hold here too: never beside kube-ovn's own Service controller
# (SPEC K10). helm reaches the cluster through the same KUBECONFIG as KUBECTL.
online=()
[ "$dry_run" = true ] || online=(--dry-run=server)
# --no-hooks: the release Job is the uninstall's, never applied by an install.
"$HELM" template vpcgw "$chart" --namespace "$NAMESPACE" --values "$values" --no-hooks "${online[@]}" >"$manifests" ||
	die "the chart refused to render (above): nothing was applied"
# The chart renders no kubeovn.io CRD (it fails instead); this holds for any CHART too (SPEC K1).
kubeovn_crds=$(awk '
	function done() { if (kind == "CustomResourceDefinition" && (name ~ /\.kubeovn\.io$/ || group == "kubeovn.io")) print name }
	/^---/ { done(); kind = ""; name = ""; group = ""; meta = 0; spec = 0; next }
	/^kind: / { kind = $2 }
	/^[^ #]/ { meta = ($0 ~ /^metadata:/); spec = ($0 ~ /^spec:/) }
	meta && /^  name: / { name = $2 }
	spec && /^  group: / { group = $2 }
	END { done() }' "$manifests")
[ -z "$kubeovn_crds" ] || die "the rendered manifests contain kube-ovn's CRDs ($kubeovn_crds): refusing to apply them"

if [ "$uninstall" = true ]; then
	[ "$dry_run" = false ] || die "uninstall has no --dry-run"
	# The chart's pre-delete hook, as helm uninstall runs it.
	hook=$work/release-job.yaml
	"$HELM" template vpcgw "$chart" --namespace "$NAMESPACE" --values "$values" --show-only templates/release-hook.yaml >"$hook" ||
		die "the chart refused to render its release Job (above): nothing was released"
	kube delete --namespace "$NAMESPACE" job/vpcgw-release --ignore-not-found --wait=true
	kube apply --server-side --force-conflicts --field-manager=vpcgw-install --filename "$hook"
	# Complete or Failed, whichever comes first; the Job's own deadline bounds it. A finished Job
	# has more than one true condition (SuccessCriteriaMet and Complete, FailureTarget and
	# Failed), which `kubectl wait --for=jsonpath` refuses, so their types are read as a list.
	deadline=$((SECONDS + 660))
	while :; do
		conditions=" $(kube get job/vpcgw-release --namespace "$NAMESPACE" -o 'jsonpath={.status.conditions[?(@.status=="True")].type}') "
		case "$conditions" in
		*" Complete "*) break ;;
		*" Failed "*) die "the release Job failed: kubectl logs --namespace $NAMESPACE job/vpcgw-release says what is left; nothing was deleted" ;;
		esac
		[ "$SECONDS" -lt "$deadline" ] ||
			die "the release Job did not complete in 11 minutes: kubectl logs --namespace $NAMESPACE job/vpcgw-release says what is left; nothing was deleted"
		sleep 2
	done
	kube logs --namespace "$NAMESPACE" job/vpcgw-release --tail=5 || true
	kube delete --namespace "$NAMESPACE" job/vpcgw-release --ignore-not-found
	# What install applied, vpcgw's CRD with it (the rendered manifests hold no kubeovn.io CRD:
	# checked above).
	kube delete --ignore-not-found --wait=true --filename "$manifests"
	# The webhook's serving certificate: cert-manager does not delete the Secret of a deleted
	# Certificate.
	kube delete --namespace "$NAMESPACE" secret/vpcgw-webhook-cert --ignore-not-found
	echo "install.sh: vpcgw uninstalled: nothing it wrote is left" >&2
	exit 0
fi
if [ "$dry_run" = true ]; then
	# No secret in a dry run: the private keys of the rendered Secrets (the webhook's serving key,
	# which the chart generates) are left empty. The keys stay, so that the output still applies
	# (kubectl apply --dry-run=server) as a Secret of its type.
	awk '
		function flush(   i) { for (i = 1; i <= n; i++) { if (secret && lines[i] ~ /^  [^ :]*\.?key: /) { sub(/: .*/, ": \"\"  # left out by install.sh --dry-run: generated at install, never printed", lines[i]) } print lines[i] } n = 0; secret = 0 }
		/^---/ { flush(); print; next }
		/^kind: Secret$/ { secret = 1 }
		{ lines[++n] = $0 }
		END { flush() }' "$manifests"
	exit 0
fi
# Only now, with every check passed, is anything created.
for ns in "$NAMESPACE" "${gateway_namespaces[@]}"; do
	kube get namespace "$ns" >/dev/null 2>&1 || kube create namespace "$ns"
done
kube apply --server-side --force-conflicts --field-manager=vpcgw-install --filename "$manifests"
if [ "$ROLLOUT_TIMEOUT" != 0 ]; then
	deployments=(deployment/vpcgw-controller)
	[ "$ENABLE_WEBHOOK" = false ] || deployments+=(deployment/vpcgw-webhook)
	for d in "${deployments[@]}"; do
		kube rollout status --namespace "$NAMESPACE" "$d" --timeout="$ROLLOUT_TIMEOUT" ||
			die "$d is not ready after $ROLLOUT_TIMEOUT (kubectl --namespace $NAMESPACE describe $d)"
	done
fi
echo "vpcgw installed in namespace $NAMESPACE (LoadBalancer gate: $ENABLE_GW_NFTABLE_LB_SVC, ClusterIP gate: $ENABLE_GW_NFTABLE_SVC_CLUSTER_IP)" >&2
[ -n "$OVN_NB_ADDR" ] || echo "VIP routes are not written (OVN_NB_ADDR is empty): route the VIPs to the gateways by hand" >&2
echo "next: kubectl vpcgw explain svc/<service> -n <namespace> --controller-namespace $NAMESPACE" >&2
