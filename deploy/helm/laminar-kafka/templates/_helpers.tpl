{{/* The chart's name, at most 63 characters. */}}
{{- define "laminar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: the StatefulSet's and so the pods' name prefix. At most 52 characters, so a
pod name <fullname>-<ordinal> stays a valid host name whose ordinal `--node-id auto` reads
(id = ordinal + 1), and the controller-revision-hash label fits.
*/}}
{{- define "laminar.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "laminar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "laminar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object but the component's. */}}
{{- define "laminar.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: laminar-kafka
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
laminar.dev/pipeline: {{ .Values.pipeline | quote }}
{{- end }}

{{/* Labels of the nodes' objects. */}}
{{- define "laminar.labels" -}}
{{ include "laminar.commonLabels" . }}
app.kubernetes.io/name: {{ include "laminar.name" . }}
app.kubernetes.io/component: node
{{- end }}

{{- define "laminar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "laminar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The topics as the TOML value: a list of names, or one "re:<regex>" string. */}}
{{- define "laminar.topicsToml" -}}
{{- .Values.topics | toJson }}
{{- end }}

{{/* The topics as one command-line value (comma-separated names, or the pattern). */}}
{{- define "laminar.topicsArg" -}}
{{- if kindIs "string" .Values.topics }}{{ .Values.topics }}{{ else }}{{ join "," .Values.topics }}{{ end }}
{{- end }}

{{/* Secrets the chart creates, or the user's existing ones: one name per concern, empty when none. */}}
{{- define "laminar.kafkaSecret" -}}
{{- if .Values.kafka.existingSecret }}{{ .Values.kafka.existingSecret }}{{ else if .Values.kafka.secretProperties }}{{ include "laminar.fullname" . }}-kafka{{ end }}
{{- end }}
{{- define "laminar.zookeeperSecret" -}}
{{- if .Values.zookeeper.existingSecret }}{{ .Values.zookeeper.existingSecret }}{{ else if .Values.zookeeper.auth }}{{ include "laminar.fullname" . }}-zookeeper{{ end }}
{{- end }}
{{- define "laminar.objectStoreSecret" -}}
{{- if .Values.objectStore.existingSecret }}{{ .Values.objectStore.existingSecret }}{{ else if or .Values.objectStore.accessKeyId .Values.objectStore.secretAccessKey }}{{ include "laminar.fullname" . }}-object-store{{ end }}
{{- end }}
{{- define "laminar.catalogSecret" -}}
{{- if .Values.catalog.existingSecret }}{{ .Values.catalog.existingSecret }}{{ else if or .Values.catalog.credential .Values.catalog.token .Values.catalog.secretProperties }}{{ include "laminar.fullname" . }}-catalog{{ end }}
{{- end }}
{{- define "laminar.schemaRegistrySecret" -}}
{{- if .Values.schemaRegistry.existingSecret }}{{ .Values.schemaRegistry.existingSecret }}{{ else if .Values.schemaRegistry.basicAuthUserInfo }}{{ include "laminar.fullname" . }}-schema-registry{{ end }}
{{- end }}

{{/*
A property value (string, number or boolean) as the string librdkafka and the catalog read. Helm reads
every YAML number as a float64, which toString writes in exponent form (52428800 -> "5.24288e+07");
toJson writes an integer as one (52428800), a fraction as one (0.5) and a boolean as true/false.
*/}}
{{- define "laminar.propertyString" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ . | toJson }}{{ end }}
{{- end }}

{{/* librdkafka property -> its LAMINAR_KAFKA__ variable (sasl.password -> LAMINAR_KAFKA__SASL_PASSWORD). */}}
{{- define "laminar.kafkaEnvName" -}}
{{- printf "LAMINAR_KAFKA__%s" (. | upper | replace "." "_") }}
{{- end }}

{{/* Where the nodes find Kafka, ZooKeeper and the S3 endpoint: the in-cluster dev servers when dev.enabled. */}}
{{- define "laminar.bootstrap" -}}
{{- if .Values.dev.enabled }}{{ include "laminar.fullname" . }}-dev-kafka:{{ .Values.dev.kafka.port }}{{ else }}{{ .Values.kafka.bootstrap }}{{ end }}
{{- end }}
{{- define "laminar.zookeeperHosts" -}}
{{- if .Values.dev.enabled }}{{ include "laminar.fullname" . }}-dev-zookeeper:{{ .Values.dev.zookeeper.port }}{{ else }}{{ .Values.zookeeper.hosts }}{{ end }}
{{- end }}
{{- define "laminar.objectStoreEndpoint" -}}
{{- if .Values.dev.enabled }}http://{{ include "laminar.fullname" . }}-dev-s3:{{ .Values.dev.s3.port }}{{ else }}{{ .Values.objectStore.endpoint }}{{ end }}
{{- end }}
