{{- define "toolgate.name" -}}toolgate-operator{{- end -}}
{{- define "toolgate.serviceAccountName" -}}toolgate-operator{{- end -}}
{{- define "toolgate.labels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "toolgate.selector" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "toolgate.operatorUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "toolgate.serviceAccountName" . }}{{- end -}}
