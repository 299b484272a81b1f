{{/*
Common names and labels. Every name the chart renders is made from gpuctl.fullname
(fullnameOverride, or the release name with nameOverride or the chart's name added unless it
contains it), so the names that refer to each other (ServiceAccounts in bindings and flags, the
Service the agents dial, the Lease, the guards) change together. The labels keep the chart's
name: `gpuctl support-bundle` selects Pods by app.kubernetes.io/name=gpuctl, and the
Deployment's and DaemonSet's selectors cannot change on upgrade.
*/}}
{{- define "gpuctl.fullname" -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuctl.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuctl.coordinatorSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end -}}

{{- define "gpuctl.agentSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{/*
A Pod template's metadata: the component's selector labels plus its podLabels, and its
podAnnotations. Fails when podLabels sets a selector label (the Pods would leave their
controller) or the serving label the leading coordinator sets on its own Pod (the gRPC Service
would send agents to a standby). Call with (dict "component" "agent" "root" $).
*/}}
{{- define "gpuctl.podMetadata" -}}
{{- $values := index .root.Values .component -}}
{{- $selector := include (printf "gpuctl.%sSelector" .component) .root -}}
{{- $reserved := append (keys (fromYaml $selector)) "gpuctl.dev/grpc-serving" -}}
{{- range $key, $_ := $values.podLabels -}}
{{- if has $key $reserved -}}
{{- fail (printf "%s.podLabels may not set %s: the chart sets it (the Pods' selector, or the leading coordinator's serving label)" $.component $key) -}}
{{- end -}}
{{- end -}}
labels:
  {{- $selector | nindent 2 }}
  {{- with $values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The component's extraEnv, after the chart's own variables. Fails on a chart variable's name
(reserved): a later entry of the same name wins, and the program would lose what it reads
there. Call with (dict "component" "agent" "reserved" (list "NODE_NAME") "root" $).
*/}}
{{- define "gpuctl.extraEnv" -}}
{{- $env := (index .root.Values .component).extraEnv -}}
{{- range $env -}}
{{- if has .name $.reserved -}}
{{- fail (printf "%s.extraEnv may not set %s: the chart sets it, and the program reads it" $.component .name) -}}
{{- end -}}
{{- end -}}
{{- with $env -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the coordinator's gRPC serving certificate (templates/_tls.tpl). */}}
{{- define "gpuctl.grpcTlsSecret" -}}
{{- include "gpuctl.tlsSecretName" . -}}
{{- end -}}

{{/*
An image reference: [registry/]repository@digest, or [registry/]repository:tag (the tag
defaults to the chart's appVersion). The component's image.registry wins over
global.imageRegistry. Call with (dict "image" .Values.x.image "root" $).
*/}}
{{- define "gpuctl.image" -}}
{{- $registry := .image.registry | default .root.Values.global.imageRegistry | trimSuffix "/" -}}
{{- $repository := ternary (printf "%s/%s" $registry .image.repository) .image.repository (ne $registry "") -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
A Pod's imagePullSecrets: global.imagePullSecrets and the component's, each listed once.
Call with (dict "secrets" .Values.x.imagePullSecrets "root" $).
*/}}
{{- define "gpuctl.imagePullSecrets" -}}
{{- with concat .root.Values.global.imagePullSecrets .secrets | uniq -}}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
The agent's SELinux type: agent.seLinuxType, or spc_t on OpenShift, where enforcing nodes
otherwise keep the container from reading other processes' /proc/<pid>/fd.
*/}}
{{- define "gpuctl.agentSELinuxType" -}}
{{- .Values.agent.seLinuxType | default (ternary "spc_t" "" .Values.openshift.enabled) -}}
{{- end -}}

{{/*
Fails the install when the release namespace enforces a Pod Security level other than
privileged: the agent (hostPID, hostNetwork, read-only hostPaths, two capabilities) would be
refused and its DaemonSet would run no Pods. lookup is empty under `helm template`, so this
only checks a real install or upgrade.
*/}}
{{- define "gpuctl.checkPodSecurity" -}}
{{- if not .Values.podSecurity.labelNamespace -}}
{{- $namespace := lookup "v1" "Namespace" "" .Release.Namespace | default dict -}}
{{- $level := dig "metadata" "labels" "pod-security.kubernetes.io/enforce" "" $namespace -}}
{{- if and $level (ne $level "privileged") -}}
{{- fail (printf "namespace %s enforces Pod Security %q, but the gpuctl agent needs \"privileged\" (hostPID, hostNetwork, hostPath volumes, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH): its DaemonSet would run no Pods. Label the namespace first: kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite (or let the chart do it: --set podSecurity.labelNamespace=true --take-ownership)" .Release.Namespace $level .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
shard.nodeSelector as the label selector the coordinator takes (--node-selector): "key=value"
terms joined by commas, keys sorted (range visits a map's keys in order); empty without a
shard. Fails without coordinator.gpudriverSelector: every shard's release would then manage
every GPUDriver.
*/}}
{{- define "gpuctl.shardSelector" -}}
{{- $shard := .Values.shard.nodeSelector -}}
{{- if $shard -}}
{{- if not .Values.coordinator.gpudriverSelector -}}
{{- fail "shard.nodeSelector needs coordinator.gpudriverSelector: each shard must manage only its own node pool's GPUDrivers (label them, e.g. gpuctl.dev/pool=a, and select that label). Two releases managing the same GPUDriver would each make a KMM Module for it, in its own namespace, and overwrite each other's status of it" -}}
{{- end -}}
{{- $terms := list -}}
{{- range $key, $value := $shard -}}
{{- $terms = append $terms (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}
{{- end -}}

{{/*
The agent Pods' nodeSelector, as JSON: agent.nodeSelector with shard.nodeSelector added, so a
shard's agents run only on its pool's nodes. Fails when both set a label to different values:
no node would match, and the DaemonSet would quietly run no Pods.
*/}}
{{- define "gpuctl.agentNodeSelector" -}}
{{- $merged := deepCopy .Values.agent.nodeSelector -}}
{{- range $key, $value := .Values.shard.nodeSelector -}}
{{- if and (hasKey $merged $key) (ne (index $merged $key) $value) -}}
{{- fail (printf "agent.nodeSelector and shard.nodeSelector disagree on label %s: %q in agent.nodeSelector, %q in shard.nodeSelector (no node can match both; drop it from agent.nodeSelector)" $key (index $merged $key) $value) -}}
{{- end -}}
{{- $_ := set $merged $key $value -}}
{{- end -}}
{{- toJson $merged -}}
{{- end -}}
