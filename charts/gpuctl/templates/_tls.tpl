{{/* The coordinator's gRPC TLS: which mode, which Secret, where agents read the CA. */}}

{{/* selfSigned | certManager | secret; the deprecated coordinator.grpc.tlsSecret means secret. */}}
{{- define "gpuctl.tlsMode" -}}
{{- $tls := .Values.coordinator.grpc.tls -}}
{{- if .Values.coordinator.grpc.tlsSecret -}}
secret
{{- else if has $tls.mode (list "selfSigned" "certManager" "secret") -}}
{{- $tls.mode -}}
{{- else -}}
{{- fail (printf "coordinator.grpc.tls.mode %q: use selfSigned, certManager or secret" $tls.mode) -}}
{{- end -}}
{{- end -}}

{{- define "gpuctl.tlsSecretName" -}}
{{- $tls := .Values.coordinator.grpc.tls -}}
{{- $mode := include "gpuctl.tlsMode" . -}}
{{- if .Values.coordinator.grpc.tlsSecret -}}
{{- .Values.coordinator.grpc.tlsSecret -}}
{{- else if eq $mode "secret" -}}
{{- required "coordinator.grpc.tls.mode=secret needs coordinator.grpc.tls.secretName" $tls.secretName -}}
{{- else -}}
{{- printf "%s-coordinator-tls" (include "gpuctl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The DNS names the serving certificate must carry: the gRPC Service's. */}}
{{- define "gpuctl.grpcServiceNames" -}}
{{- $service := printf "%s-coordinator" (include "gpuctl.fullname" .) -}}
{{- $ns := .Release.Namespace -}}
{{- list $service (printf "%s.%s" $service $ns) (printf "%s.%s.svc" $service $ns) (printf "%s.%s.svc.cluster.local" $service $ns) | toJson -}}
{{- end -}}

{{/* Where agents read the CA: ca.source, or by default the coordinator's CA ConfigMap
(selfSigned) or the TLS Secret's ca.crt (certManager, secret). */}}
{{- define "gpuctl.caSource" -}}
{{- $source := .Values.coordinator.grpc.tls.ca.source -}}
{{- if $source -}}
{{- $source -}}
{{- else if eq (include "gpuctl.tlsMode" .) "selfSigned" -}}
coordinatorConfigMap
{{- else -}}
tlsSecret
{{- end -}}
{{- end -}}

{{/* The agent's CA volume (nothing with ca.source=system: the system trust store). */}}
{{- define "gpuctl.agentCaVolume" -}}
{{- $ca := .Values.coordinator.grpc.tls.ca -}}
{{- $source := include "gpuctl.caSource" . -}}
{{- if eq $source "coordinatorConfigMap" }}
- name: coordinator-ca
  # Written by the leading coordinator at startup; the Pod starts once it exists.
  configMap:
    name: {{ include "gpuctl.fullname" . }}-coordinator-ca
    items:
      - {key: ca.crt, path: ca.crt}
{{- else if eq $source "tlsSecret" }}
- name: coordinator-ca
  secret:
    secretName: {{ include "gpuctl.tlsSecretName" . }}
    # Only the CA: the serving key never reaches the nodes.
    items:
      - {key: ca.crt, path: ca.crt}
{{- else if eq $source "configMap" }}
- name: coordinator-ca
  configMap:
    name: {{ required "coordinator.grpc.tls.ca.source=configMap needs coordinator.grpc.tls.ca.name" $ca.name }}
    items:
      - {key: {{ $ca.key }}, path: ca.crt}
{{- else if eq $source "secret" }}
- name: coordinator-ca
  secret:
    secretName: {{ required "coordinator.grpc.tls.ca.source=secret needs coordinator.grpc.tls.ca.name" $ca.name }}
    items:
      - {key: {{ $ca.key }}, path: ca.crt}
{{- else if ne $source "system" }}
{{- fail (printf "coordinator.grpc.tls.ca.source %q: use tlsSecret, configMap, secret or system" $source) }}
{{- end }}
{{- end -}}
