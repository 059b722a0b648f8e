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

{{- define "vpcgw.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
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

{{- define "vpcgw.gateLbSvc" -}}
{{- include "vpcgw.bool" (list .Values.features.enableGwNftableLoadbalancerService (index (.Values.func | default dict) "ENABLE_GW_NFTABLE_LB_SVC") false "features.enableGwNftableLoadbalancerService") -}}
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
{{- include "vpcgw.bool" (list .Values.controller.leaderElect nil (gt (int .Values.controller.replicas) 1) "controller.leaderElect") -}}
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
{{- fail "--enable-gw-nftable-lb-svc and --enable-lb-svc both claim LoadBalancer ingress: turn one off" -}}
{{- end -}}
{{- if and $podlb (not $lb) (not $cip) -}}
{{- fail "--enable-lb-svc needs ClusterIPs to be served: turn on enableLb or features.enableGwNftableServiceClusterIp" -}}
{{- end -}}
{{- if not (has .Values.transport (list "exec" "local")) -}}
{{- fail (printf "transport must be exec or local, not %q" .Values.transport) -}}
{{- end -}}
{{- if and .Values.webhook.enabled .Values.webhook.certs.existingSecret (not .Values.webhook.certManager.enabled) (not .Values.webhook.certs.caBundle) -}}
{{- fail "webhook.certs.existingSecret needs webhook.certs.caBundle (base64 of the CA's PEM)" -}}
{{- end -}}
{{- if not .Values.gatewayNamespaces -}}
{{- fail "gatewayNamespaces must name at least one namespace (where the VPC NAT gateway pods run)" -}}
{{- end -}}
{{- end -}}
