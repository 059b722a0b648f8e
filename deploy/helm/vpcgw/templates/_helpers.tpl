{{/* Base name of every object: "vpcgw" unless fullnameOverride says otherwise. */}}
{{- define "vpcgw.fullname" -}}
{{- default "vpcgw" .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "vpcgw.labels" -}}
app.kubernetes.io/name: vpcgw
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The image of the controller and the webhook: <repository>:<tag> (tag default: the chart's
appVersion, which is what `make images` tags a release commit with), or pinned with image.digest
(the index digest of bin/images/images.json): <repository>@<digest>, or <repository>:<tag>@<digest>
when image.tag is set (the runtime pulls by the digest; the tag only informs).
*/}}
{{- define "vpcgw.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- if $img.tag -}}
{{- printf "%s:%s@%s" $img.repository (toString $img.tag) $img.digest -}}
{{- else -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- end -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion (toString (default "" $img.tag))) -}}
{{- end -}}
{{- end -}}

{{- define "vpcgw.controllerSA" -}}
{{- default (printf "%s-controller" (include "vpcgw.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "vpcgw.webhookSA" -}}
{{- default (printf "%s-webhook" (include "vpcgw.fullname" .)) .Values.webhook.serviceAccount.name -}}
{{- end -}}

{{/* The controller's user name, the only one that may write share records (SPEC W4). */}}
{{- define "vpcgw.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "vpcgw.controllerSA" .) -}}
{{- end -}}

{{/*
vpcgw.bool resolves one switch: (list <v2 value> <v1 value> <default>). The first that is set (not
null) wins; "true"/"false" strings (--set-string, kube-ovn values files) are accepted; anything
else fails the render.
*/}}
{{- define "vpcgw.bool" -}}
{{- $v := index . 2 -}}
{{- $name := index . 3 -}}
{{- if not (kindIs "invalid" (index . 1)) }}{{ $v = index . 1 }}{{ end -}}
{{- if not (kindIs "invalid" (index . 0)) }}{{ $v = index . 0 }}{{ end -}}
{{- $s := toString $v -}}
{{- if not (has $s (list "true" "false")) -}}
{{- fail (printf "%s must be true or false, not %q" $name $s) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/*
The LoadBalancer gate is on unless set (serving LoadBalancer Services is why one installs vpcgw,
SPEC O4); the ClusterIP gate stays opt-in (it needs kube-ovn's --enable-lb=false).
*/}}
{{- define "vpcgw.gateLbSvc" -}}
{{- include "vpcgw.bool" (list .Values.features.enableGwNftableLoadbalancerService (index (.Values.func | default dict) "ENABLE_GW_NFTABLE_LB_SVC") true "features.enableGwNftableLoadbalancerService") -}}
{{- end -}}
{{- define "vpcgw.gateClusterIp" -}}
{{- include "vpcgw.bool" (list .Values.features.enableGwNftableServiceClusterIp (index (.Values.func | default dict) "ENABLE_GW_NFTABLE_SVC_CLUSTER_IP") false "features.enableGwNftableServiceClusterIp") -}}
{{- end -}}
{{- define "vpcgw.enableLb" -}}
{{- include "vpcgw.bool" (list .Values.enableLb (index (.Values.func | default dict) "ENABLE_LB") true "enableLb") -}}
{{- end -}}
{{- define "vpcgw.enableLbSvc" -}}
{{- include "vpcgw.bool" (list .Values.enableLbSvc (index (.Values.func | default dict) "ENABLE_LB_SVC") false "enableLbSvc") -}}
{{- end -}}

{{- define "vpcgw.leaderElect" -}}
{{- include "vpcgw.bool" (list .Values.controller.leaderElect nil true "controller.leaderElect") -}}
{{- end -}}

{{/* The startup matrix of SPEC F2, checked at render time with the controller's own words. */}}
{{- define "vpcgw.validate" -}}
{{- $lbsvc := eq (include "vpcgw.gateLbSvc" .) "true" -}}
{{- $cip := eq (include "vpcgw.gateClusterIp" .) "true" -}}
{{- $lb := eq (include "vpcgw.enableLb" .) "true" -}}
{{- $podlb := eq (include "vpcgw.enableLbSvc" .) "true" -}}
{{- if and $cip $lb -}}
{{- fail "--enable-gw-nftable-svc-cluster-ip and --enable-lb both claim Service ClusterIPs: set enableLb (or func.ENABLE_LB) to false, or turn the ClusterIP gate off" -}}
{{- end -}}
{{- if and $lbsvc $podlb -}}
{{- fail "--enable-gw-nftable-lb-svc and --enable-lb-svc both claim LoadBalancer ingress: turn one off (the LoadBalancer gate is on unless features.enableGwNftableLoadbalancerService=false)" -}}
{{- end -}}
{{- if and $podlb (not $lb) (not $cip) -}}
{{- fail "--enable-lb-svc needs ClusterIPs to be served: turn on enableLb or features.enableGwNftableServiceClusterIp" -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]+([._-]+[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$" (toString .Values.image.repository)) -}}
{{- fail (printf "image.repository must be an image repository like ghcr.io/vpcgw/vpcgw (no tag, no digest), not %q" (toString .Values.image.repository)) -}}
{{- end -}}
{{- if and .Values.image.tag (not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" (toString .Values.image.tag))) -}}
{{- fail (printf "image.tag must be an image tag (use --set-string for one like 1.0), not %q" (toString .Values.image.tag)) -}}
{{- end -}}
{{- if and .Values.image.digest (not (regexMatch "^sha256:[a-f0-9]{64}$" (toString .Values.image.digest))) -}}
{{- fail (printf "image.digest must be sha256:<64 hex digits> (the digest in bin/images/images.json), not %q" (toString .Values.image.digest)) -}}
{{- end -}}
{{- if and (eq .Values.transport "exec") .Values.agentBinaries (not (regexMatch "^(/[A-Za-z0-9._-]+)+$" (toString .Values.agentBinaries))) -}}
{{- fail (printf "agentBinaries must be an absolute directory of the vpcgw image, or empty, not %q" (toString .Values.agentBinaries)) -}}
{{- end -}}
{{- if not (has .Values.transport (list "exec" "local")) -}}
{{- fail (printf "transport must be exec or local, not %q" .Values.transport) -}}
{{- end -}}
{{- if and .Values.webhook.enabled .Values.webhook.certs.existingSecret (not .Values.webhook.certManager.enabled) (not .Values.webhook.certs.caBundle) -}}
{{- fail "webhook.certs.existingSecret needs webhook.certs.caBundle (base64 of the CA's PEM)" -}}
{{- end -}}
{{- if not (has .Values.backendPick (list "hash" "random")) -}}
{{- fail (printf "backendPick must be hash or random, not %q" (toString .Values.backendPick)) -}}
{{- end -}}
{{- if not (has .Values.ledger (list "service-record" "iptables-dnat-rule")) -}}
{{- fail (printf "ledger must be service-record or iptables-dnat-rule, not %q" (toString .Values.ledger)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (toString .Values.kubeOvn.namespace)) -}}
{{- fail (printf "kubeOvn.namespace must be a namespace name (kube-ovn's, where ConfigMap ovn-vpc-nat-config is), not %q" (toString .Values.kubeOvn.namespace)) -}}
{{- end -}}
{{- /* It is quoted into CEL expressions: a user name's characters only. */ -}}
{{- if not (regexMatch "^[A-Za-z0-9][-A-Za-z0-9_.:@]*$" (toString .Values.kubeOvn.serviceAccount)) -}}
{{- fail (printf "kubeOvn.serviceAccount must be kube-ovn-controller's user name, like system:serviceaccount:kube-system:ovn, not %q" (toString .Values.kubeOvn.serviceAccount)) -}}
{{- end -}}
{{- if hasKey .Values "gatewayNamespaces" -}}
{{- fail "gatewayNamespaces is gone: pods/exec is granted in kubeOvn.namespace, plus extraGatewayNamespaces for gateways with spec.namespace elsewhere (kube-ovn master); there is no cluster-wide pods/exec" -}}
{{- end -}}
{{- range $ns := .Values.extraGatewayNamespaces -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (toString $ns)) -}}
{{- fail (printf "extraGatewayNamespaces must list namespace names, not %q (there is no cluster-wide pods/exec)" (toString $ns)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespaces where the controller may exec into gateway pods (SPEC N5), one per line. */}}
{{- define "vpcgw.gatewayNamespaces" -}}
{{- prepend (.Values.extraGatewayNamespaces | default list) .Values.kubeOvn.namespace | uniq | join "\n" -}}
{{- end -}}

{{/* The kube-ovn CRDs vpcgw reads and writes objects of; kube-ovn installs them (SPEC K1). */}}
{{- define "vpcgw.kubeOvnCRDs" -}}
vpc-nat-gateways.kubeovn.io iptables-eips.kubeovn.io iptables-dnat-rules.kubeovn.io iptables-fip-rules.kubeovn.io subnets.kubeovn.io vpcs.kubeovn.io ips.kubeovn.io
{{- end -}}

{{/*
vpcgw.requireKubeOvn fails helm install/upgrade (and helm template --dry-run=server) where one of
kube-ovn's CRDs is missing: vpcgw never installs them itself (SPEC K1). Plain helm template and
helm lint have no cluster (every lookup is empty, even of kube-system, which every cluster has),
so they skip the check.

It also refuses an upgrade that would delete kube-ovn's CRDs: chart 0.1.0 could install them as
part of the release; helm upgrade deletes what the release no longer renders unless it carries
helm.sh/resource-policy: keep (crds.keep, true by default then).
*/}}
{{- define "vpcgw.requireKubeOvn" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" -}}
{{- $missing := list -}}
{{- range $name := splitList " " (include "vpcgw.kubeOvnCRDs" .) -}}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name -}}
{{- if not $crd -}}
{{- $missing = append $missing $name -}}
{{- else -}}
{{- $ann := $crd.metadata.annotations | default dict -}}
{{- if and (eq (index $ann "meta.helm.sh/release-name" | default "") $.Release.Name) (eq (index $ann "meta.helm.sh/release-namespace" | default "") $.Release.Namespace) (ne (index $ann "helm.sh/resource-policy" | default "") "keep") -}}
{{- fail (printf "CRD %s belongs to this release (an older vpcgw chart installed it) without helm.sh/resource-policy: keep, so this upgrade would delete it and every kube-ovn object of its kind: run `kubectl annotate crd %s helm.sh/resource-policy=keep` first" $name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "kube-ovn's CRDs %s are missing: install kube-ovn first (vpcgw never installs kube-ovn's CRDs)" (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
vpcgw.refuseSecondWriter fails helm install/upgrade (and helm template --dry-run=server, which
install.sh runs) where kube-ovn-controller serves Services through the gateways itself (SPEC K10):
the same rules as internal/model/secondwriter.go, which the running controller applies. A gate
flag of its Deployment given without a value or with a true one, or one this cannot read (a
value other than a boolean, or $(VAR) without a literal env value), refuses; so does kube-ovn's
ConfigMap ovn-vpc-nat-config with such a key. A flag not given is off on kube-ovn v1.16 and older
(they have none); on newer or unknown releases --enable-nftable-lb-svc is on by default (#7403),
so the Deployment must turn the gates off explicitly: that flag, or both of #7451's split flags.
Without a cluster (plain helm template) every lookup is empty and nothing is checked.
*/}}
{{- define "vpcgw.refuseSecondWriter" -}}
{{- $ns := .Values.kubeOvn.namespace -}}
{{- $name := .Values.kubeOvn.controllerDeployment | default "kube-ovn-controller" -}}
{{- $flags := list "enable-nftable-lb-svc" "enable-gw-nftable-lb-svc" "enable-gw-nftable-svc-cluster-ip" -}}
{{- $cm := lookup "v1" "ConfigMap" $ns "ovn-vpc-nat-config" -}}
{{- if $cm -}}
{{- range $flag := $flags -}}
{{- $v := index ($cm.data | default dict) $flag -}}
{{- if and (hasKey ($cm.data | default dict) $flag) (not (has (trim $v) (list "0" "f" "F" "FALSE" "false" "False"))) -}}
{{- fail (printf "kube-ovn's ConfigMap %s/ovn-vpc-nat-config sets %s=%q: kube-ovn serves Services through the gateways itself, and vpcgw must not be a second writer (SPEC K10); see the user guide's migration section" $ns $flag $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $d := lookup "apps/v1" "Deployment" $ns $name -}}
{{- if $d -}}
{{- $where := printf "kube-ovn-controller's Deployment %s/%s" $ns $name -}}
{{- $explicit := dict -}}
{{- $minor := -1 -}}
{{- range $c := $d.spec.template.spec.containers -}}
{{- $env := dict -}}
{{- range $e := $c.env | default list -}}
{{- if not $e.valueFrom -}}{{- $_ := set $env $e.name ($e.value | default "") -}}{{- end -}}
{{- end -}}
{{- range $arg := concat ($c.command | default list) ($c.args | default list) -}}
{{- if hasPrefix "-" $arg -}}
{{- $s := trimPrefix "-" (trimPrefix "-" $arg) -}}
{{- $flag := $s -}}
{{- $given := "" -}}
{{- if contains "=" $s -}}
{{- $kv := splitn "=" 2 $s -}}
{{- $flag = $kv._0 -}}
{{- $given = $kv._1 -}}
{{- end -}}
{{- if has $flag $flags -}}
{{- if not (contains "=" $s) -}}
{{- fail (printf "%s, container %s: --%s is given without a value (on): kube-ovn serves Services through the gateways itself, and vpcgw must not be a second writer (SPEC K10); see the user guide's migration section" $where $c.name $flag) -}}
{{- end -}}
{{- $v := $given -}}
{{- $ref := regexFind "^\\$\\([A-Za-z_][A-Za-z0-9_]*\\)$" $v -}}
{{- if $ref -}}
{{- $var := trimSuffix ")" (trimPrefix "$(" $ref) -}}
{{- $v = ternary (index $env $var) "unreadable" (hasKey $env $var) -}}
{{- end -}}
{{- $v = trim $v -}}
{{- if has $v (list "1" "t" "T" "TRUE" "true" "True") -}}
{{- fail (printf "%s, container %s: --%s is on: kube-ovn serves Services through the gateways itself, and vpcgw must not be a second writer (SPEC K10); see the user guide's migration section" $where $c.name $flag) -}}
{{- else if has $v (list "0" "f" "F" "FALSE" "false" "False") -}}
{{- $_ := set $explicit $flag true -}}
{{- else -}}
{{- fail (printf "%s, container %s: cannot read --%s=%s, so kube-ovn may serve Services through the gateways itself: give it as true or false (SPEC K10)" $where $c.name $flag $given) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $ref := first (splitList "@" ($c.image | default "")) -}}
{{- $last := last (splitList "/" $ref) -}}
{{- if and (contains ":" $last) (eq (first (splitList ":" $last)) "kube-ovn") -}}
{{- $m := regexFind "^v?1\\.[0-9]+" (last (splitList ":" $last)) -}}
{{- if $m -}}
{{- $mm := last (splitList "." $m) | atoi -}}
{{- if gt $mm $minor -}}{{- $minor = $mm -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (and (ge $minor 0) (le $minor 16)) -}}
{{- $split := or (hasKey $explicit "enable-gw-nftable-lb-svc") (hasKey $explicit "enable-gw-nftable-svc-cluster-ip") -}}
{{- $off := or (and (hasKey $explicit "enable-gw-nftable-lb-svc") (hasKey $explicit "enable-gw-nftable-svc-cluster-ip")) (and (not $split) (hasKey $explicit "enable-nftable-lb-svc")) -}}
{{- if not $off -}}
{{- fail (printf "%s runs a kube-ovn release newer than v1.16 (or one the chart cannot tell from its image), whose own Service controller is on unless turned off: set --enable-nftable-lb-svc=false on it (or, on releases with --enable-gw-nftable-lb-svc, both --enable-gw-nftable-lb-svc=false and --enable-gw-nftable-svc-cluster-ip=false) before installing vpcgw, so that there are never two writers (SPEC K10)" $where) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
vpcgw.seconds turns a duration value (list <value> <name>) such as "5m" or "1h30m" (units s, m,
h, d, w) into whole seconds, for PromQL comparisons (PromQL has no duration literals there).
Anything else fails the render.
*/}}
{{- define "vpcgw.seconds" -}}
{{- $d := toString (index . 0) -}}
{{- if not (regexMatch "^([0-9]+[smhdw])+$" $d) -}}
{{- fail (printf "%s must be a duration in s, m, h, d or w, like 5m or 1h30m, not %q" (index . 1) $d) -}}
{{- end -}}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 "w" 604800 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[smhdw]" $d -1 -}}
{{- $total = add $total (mul (regexFind "^[0-9]+" . | atoi) (index $units (regexFind "[smhdw]$" .))) -}}
{{- end -}}
{{- if eq (int $total) 0 -}}
{{- fail (printf "%s must be longer than 0, not %q" (index . 1) $d) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The controller's flags after its command: the Deployment runs `controller` with them, the
pre-delete hook `release` with the same ones (SPEC O4: the release must see the cluster as the
controller does).
*/}}
{{- define "vpcgw.controllerFlags" -}}
{{- $leader := eq (include "vpcgw.leaderElect" .) "true" -}}
- --enable-gw-nftable-lb-svc={{ include "vpcgw.gateLbSvc" . }}
- --enable-gw-nftable-svc-cluster-ip={{ include "vpcgw.gateClusterIp" . }}
- --enable-lb={{ include "vpcgw.enableLb" . }}
- --enable-lb-svc={{ include "vpcgw.enableLbSvc" . }}
- --transport={{ .Values.transport }}
{{- if eq .Values.transport "exec" }}
# The agent builds of the image (linux/amd64 and arm64), copied into each gateway
# container for its architecture; empty: the gateway image must have the agent.
- --agent-binaries={{ .Values.agentBinaries }}
{{- end }}
- --ledger={{ .Values.ledger }}
- --backend-pick={{ .Values.backendPick }}
- --kube-ovn-namespace={{ .Values.kubeOvn.namespace }}
- --kube-ovn-controller-deployment={{ .Values.kubeOvn.controllerDeployment | default "kube-ovn-controller" }}
- --leader-elect={{ $leader }}
{{- if $leader }}
- --leader-election-namespace={{ .Release.Namespace }}
{{- end }}
{{- if .Values.controller.metricsSecure }}
- --metrics-bind-address=:{{ .Values.controller.metricsPort }}
- --metrics-secure=true
{{- else }}
- --metrics-bind-address=127.0.0.1:{{ .Values.controller.metricsPort }}
{{- end }}
- --health-probe-bind-address=:{{ .Values.controller.healthPort }}
- --min-sync-interval={{ .Values.controller.minSyncInterval }}
{{- with .Values.ovn.nbAddr }}
- --ovn-nb-addr={{ . }}
{{- end }}
{{- if .Values.ovn.tls.secretName }}
- --ovn-nb-cert=/var/run/vpcgw/ovn-tls/{{ .Values.ovn.tls.certKey }}
- --ovn-nb-key=/var/run/vpcgw/ovn-tls/{{ .Values.ovn.tls.keyKey }}
- --ovn-nb-ca=/var/run/vpcgw/ovn-tls/{{ .Values.ovn.tls.caKey }}
{{- end }}
- --log-format={{ .Values.controller.logFormat }}
- --v={{ .Values.controller.logVerbosity }}
{{- if .Values.controller.debug }}
- --debug
{{- end }}
{{- range .Values.controller.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
vpcgw.availabilityAlerts renders the two alerts on one part's scrape job (a dict: name as in the
alert's name, what as in the text, job, ns, release, base the runbook base URL, kinds what to list
beside its pods, impact and next sentences): Vpcgw<name>Down, a replica Prometheus has not scraped
for 5 minutes (up == 0; a warning, others may answer), and Vpcgw<name>Absent, no replica up at all
(absent of any up == 1: the targets are gone, or every one is down; critical).
*/}}
{{- define "vpcgw.availabilityAlerts" -}}
{{- $sel := printf "{job=%q, namespace=%q}" .job .ns -}}
{{- $list := printf "kubectl -n %s get %s -l app.kubernetes.io/instance=%s,app.kubernetes.io/component=%s" .ns .kinds .release .what -}}
{{- $deployment := trimSuffix "-metrics" .job -}}
- alert: Vpcgw{{ .name }}Down
  expr: |-
    up{{ $sel }} == 0
  for: 5m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%q" (printf "vpcgw's %s pod {{ $labels.pod }} is down" .what) }}
    description: {{ printf "%q" (printf "Prometheus has failed to scrape the %s's /metrics on pod {{ $labels.pod }} for 5 minutes: the pod does not run (crashes, restarts) or refuses the scrape (the Prometheus' service account is not bound to the metrics reader role). When no other replica answers, Vpcgw%sAbsent fires too." .what .name) }}
    runbook: {{ printf "%q" (printf "%s; kubectl -n %s describe pod {{ $labels.pod }} (events, restarts); kubectl -n %s logs {{ $labels.pod }} --previous; %s" $list .ns .ns .next) }}
    runbook_url: {{ printf "%s#vpcgw%sdown" .base .what | quote }}
- alert: Vpcgw{{ .name }}Absent
  expr: |-
    absent(up{{ $sel }} == 1)
  for: 5m
  labels:
    severity: critical
  annotations:
    summary: {{ printf "%q" (printf "no vpcgw %s is up" .what) }}
    description: {{ printf "%q" (printf "For 5 minutes no pod of Deployment %s/%s has answered Prometheus' scrape (job %s): none runs, or every one fails. %s" .ns $deployment .job .impact) }}
    runbook: {{ printf "%q" (printf "%s; kubectl -n %s describe deployment %s (replicas, conditions, events); %s" $list .ns $deployment .next) }}
    runbook_url: {{ printf "%s#vpcgw%sabsent" .base .what | quote }}
{{- end -}}
