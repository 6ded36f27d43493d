{{/* The name of the ServiceAccount, the workload and the prefix of the rest. */}}
{{- define "kube-ccm.name" -}}
{{- .Values.name -}}
{{- end -}}

{{/* The namespace of the namespaced objects (not the RBAC pinned to kube-system). */}}
{{- define "kube-ccm.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* What selects the pods: the same single label as deploy/, so that the
     affinity default and existing installs keep matching. */}}
{{- define "kube-ccm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-ccm.name" . }}
{{- end -}}

{{- define "kube-ccm.labels" -}}
{{ include "kube-ccm.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "kube-ccm.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kube-ccm.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "kube-ccm.serviceAccountName" -}}
{{- include "kube-ccm.name" . -}}
{{- end -}}

{{/* The Deployment's replicas: `replicas`, or when it is null 1 with the simulated
     cloud (whose state is a file in each pod's own /tmp, so a second replica is a
     second cloud) and 2 with any other provider (deploy/deployment.yaml's). */}}
{{- define "kube-ccm.replicas" -}}
{{- if kindIs "invalid" .Values.replicas -}}
{{- if eq .Values.cloudProvider "simulated" -}}1{{- else -}}2{{- end -}}
{{- else -}}
{{- int .Values.replicas -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the cloud config, or "" when there is none. */}}
{{- define "kube-ccm.cloudConfigSecret" -}}
{{- if .Values.cloudConfig.existingSecret -}}
{{- .Values.cloudConfig.existingSecret -}}
{{- else if .Values.cloudConfig.content -}}
{{- printf "%s-config" (include "kube-ccm.name" .) -}}
{{- end -}}
{{- end -}}

{{/* --controllers as a comma-separated list ("" when it is the default "*"). */}}
{{- define "kube-ccm.controllers" -}}
{{- $controllers := .Values.controllers -}}
{{- if and .Values.pvLabels.enabled (not (has "pvl" $controllers)) -}}
{{- $controllers = append $controllers "pvl" -}}
{{- end -}}
{{- if and .Values.kubeletServingCertApprover.enabled (not (has "servingcert" $controllers)) -}}
{{- $controllers = append $controllers "servingcert" -}}
{{- end -}}
{{- if not (eq (join "," $controllers) "*") -}}
{{- join "," $controllers -}}
{{- end -}}
{{- end -}}

{{/* --feature-gates as Name=bool pairs, sorted. */}}
{{- define "kube-ccm.featureGates" -}}
{{- $gates := deepCopy .Values.featureGates -}}
{{- if .Values.webhook.enabled -}}
{{- $_ := set $gates "CloudControllerManagerWebhook" true -}}
{{- end -}}
{{- $pairs := list -}}
{{- range $name := keys $gates | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%t" $name (get $gates $name)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Refuse values that contradict each other, with what to do instead. */}}
{{- define "kube-ccm.validate" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.tls.secretName) -}}
{{- fail "webhook.enabled needs webhook.tls.secretName: create a kubernetes.io/tls Secret with a serving certificate for the webhook Service's DNS name and put its CA (base64 PEM) in webhook.caBundle" -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (eq .Values.kind "Deployment") (gt (int (include "kube-ccm.replicas" .)) 1) -}}
{{- fail "leaderElection.enabled=false with more than one replica would run the controllers twice: set replicas=1 or enable leader election" -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (eq .Values.kind "DaemonSet") -}}
{{- fail "leaderElection.enabled=false with kind=DaemonSet would run the controllers on every matched node: enable leader election or use kind=Deployment with replicas=1" -}}
{{- end -}}
{{- if and (not .Values.serveUnclassedLoadBalancers) (not .Values.loadBalancerClasses) -}}
{{- fail "serveUnclassedLoadBalancers=false with no loadBalancerClasses would serve no Service: name the classes to serve in loadBalancerClasses (e.g. kube-ccm.io/ippool), or keep serving Services without a class" -}}
{{- end -}}
{{- if and .Values.admissionPolicies.enabled (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "admissionPolicies.enabled needs Kubernetes 1.30 or later (ValidatingAdmissionPolicy, admissionregistration.k8s.io/v1), and the cluster is %s: set admissionPolicies.enabled=false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $mounts := dict -}}
{{- range $mount := include "kube-ccm.mountPaths" . | fromJsonArray -}}
{{- if hasKey $mounts $mount.path -}}
{{- fail (printf "%s and %s are both mounted at %s: give one of them another directory" (get $mounts $mount.path) $mount.value $mount.path) -}}
{{- end -}}
{{- $_ := set $mounts $mount.path $mount.value -}}
{{- end -}}
{{- /* extraVolumes: not a name the chart gives its own volumes (whether or not
       they are rendered now, so that turning a value on later cannot collide). */ -}}
{{- $chartVolumes := dict
  "cloud-config" "the cloud config"
  "webhook-tls" "webhook.tls.secretName"
  "libvirt-credentials" "libvirt.credentialsSecret"
  "libvirt-sockets" "libvirt.hostSocket"
  "proxmox" "proxmox.tokenSecret and proxmox.caConfigMap"
  "tmp" "its /tmp"
-}}
{{- $volumes := dict -}}
{{- range $i, $volume := .Values.extraVolumes -}}
{{- if hasKey $chartVolumes $volume.name -}}
{{- fail (printf "extraVolumes[%d]: the chart names a volume %q itself (for %s): give yours another name, and use that name in extraVolumeMounts" $i $volume.name (get $chartVolumes $volume.name)) -}}
{{- end -}}
{{- if hasKey $volumes $volume.name -}}
{{- fail (printf "%s and extraVolumes[%d] are both named %q: give each volume a name of its own" (get $volumes $volume.name) $i $volume.name) -}}
{{- end -}}
{{- $_ := set $volumes $volume.name (printf "extraVolumes[%d]" $i) -}}
{{- end -}}
{{- /* env and extraEnv: each name once (Kubernetes would keep only the last value). */ -}}
{{- $vars := dict -}}
{{- range $list := list "env" "extraEnv" -}}
{{- range $i, $var := index $.Values $list -}}
{{- if and (kindIs "map" $var) $var.name -}}
{{- $where := printf "%s[%d]" $list $i -}}
{{- if hasKey $vars $var.name -}}
{{- fail (printf "%s and %s both set the environment variable %s: keep one of them" (get $vars $var.name) $where $var.name) -}}
{{- end -}}
{{- $_ := set $vars $var.name $where -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $managed := dict
  "cloud-provider" "cloudProvider"
  "cloud-config" "cloudConfig"
  "controllers" "controllers (and pvLabels.enabled, kubeletServingCertApprover.enabled)"
  "cluster-cidr" "clusterCIDR"
  "configure-cloud-routes" "configureCloudRoutes"
  "load-balancer-class" "loadBalancerClasses"
  "serve-unclassed-load-balancers" "serveUnclassedLoadBalancers"
  "use-service-account-credentials" "useServiceAccountCredentials"
  "leader-elect" "leaderElection.enabled"
  "leader-elect-lease-duration" "leaderElection.leaseDuration"
  "leader-elect-renew-deadline" "leaderElection.renewDeadline"
  "leader-elect-retry-period" "leaderElection.retryPeriod"
  "leader-elect-resource-name" "leaderElection.resourceName"
  "leader-elect-resource-namespace" "leaderElection.resourceNamespace"
  "feature-gates" "featureGates"
  "webhooks" "webhook.enabled"
  "webhook-secure-port" "webhook.port"
  "webhook-tls-cert-file" "webhook.tls.secretName"
  "webhook-tls-private-key-file" "webhook.tls.secretName"
  "secure-port" "securePort"
  "v" "verbosity"
-}}
{{- range $flag := keys .Values.extraArgs | sortAlpha -}}
{{- if hasKey $managed $flag -}}
{{- fail (printf "extraArgs.%s: the chart sets --%s itself; use the value %s instead" $flag $flag (get $managed $flag)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The container's volume mounts as a JSON list of {path, value}: the directory
     and the value that asks for it (to refuse two at one path). */}}
{{- define "kube-ccm.mountPaths" -}}
{{- $mounts := list -}}
{{- if include "kube-ccm.cloudConfigSecret" . -}}
{{- $mounts = append $mounts (dict "path" (.Values.cloudConfig.mountPath | trimSuffix "/") "value" "cloudConfig.mountPath") -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- $mounts = append $mounts (dict "path" (.Values.webhook.tls.mountPath | trimSuffix "/") "value" "webhook.tls.mountPath") -}}
{{- end -}}
{{- if .Values.libvirt.credentialsSecret -}}
{{- $mounts = append $mounts (dict "path" (.Values.libvirt.credentialsMountPath | trimSuffix "/") "value" "libvirt.credentialsMountPath") -}}
{{- end -}}
{{- if .Values.libvirt.hostSocket -}}
{{- $mounts = append $mounts (dict "path" "/var/run/libvirt" "value" "libvirt.hostSocket") -}}
{{- end -}}
{{- if or .Values.proxmox.tokenSecret .Values.proxmox.caConfigMap -}}
{{- $mounts = append $mounts (dict "path" (.Values.proxmox.mountPath | trimSuffix "/") "value" "proxmox.mountPath") -}}
{{- end -}}
{{- $mounts = append $mounts (dict "path" "/tmp" "value" "the chart's /tmp") -}}
{{- range $i, $mount := .Values.extraVolumeMounts -}}
{{- $mounts = append $mounts (dict "path" ($mount.mountPath | trimSuffix "/") "value" (printf "extraVolumeMounts[%d] (%s)" $i $mount.name)) -}}
{{- end -}}
{{- toJson $mounts -}}
{{- end -}}

{{/* The daemon's arguments, as a YAML list (toYaml quotes what needs it). */}}
{{- define "kube-ccm.args" -}}
{{- $v := .Values -}}
{{- $args := list (printf "--cloud-provider=%s" $v.cloudProvider) -}}
{{- if include "kube-ccm.cloudConfigSecret" . -}}
{{- $args = append $args (printf "--cloud-config=%s/%s" ($v.cloudConfig.mountPath | trimSuffix "/") $v.cloudConfig.key) -}}
{{- end -}}
{{- $args = append $args (printf "--leader-elect=%t" $v.leaderElection.enabled) -}}
{{- if $v.leaderElection.enabled -}}
{{- /* Passed only when not the daemon's default, so the default args equal deploy/'s. */ -}}
{{- $defaults := dict "leaseDuration" "15s" "renewDeadline" "10s" "retryPeriod" "2s" "resourceName" "cloud-controller-manager" "resourceNamespace" "kube-system" -}}
{{- $flags := dict "leaseDuration" "lease-duration" "renewDeadline" "renew-deadline" "retryPeriod" "retry-period" "resourceName" "resource-name" "resourceNamespace" "resource-namespace" -}}
{{- range $key := list "leaseDuration" "renewDeadline" "retryPeriod" "resourceName" "resourceNamespace" -}}
{{- $value := get $v.leaderElection $key -}}
{{- if ne $value (get $defaults $key) -}}
{{- $args = append $args (printf "--leader-elect-%s=%s" (get $flags $key) $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with include "kube-ccm.controllers" . -}}
{{- $args = append $args (printf "--controllers=%s" .) -}}
{{- end -}}
{{- if $v.clusterCIDR -}}
{{- $args = append $args (printf "--cluster-cidr=%s" $v.clusterCIDR) -}}
{{- end -}}
{{- if not $v.configureCloudRoutes -}}
{{- $args = append $args "--configure-cloud-routes=false" -}}
{{- end -}}
{{- range $class := $v.loadBalancerClasses -}}
{{- $args = append $args (printf "--load-balancer-class=%s" $class) -}}
{{- end -}}
{{- if not $v.serveUnclassedLoadBalancers -}}
{{- $args = append $args "--serve-unclassed-load-balancers=false" -}}
{{- end -}}
{{- if $v.useServiceAccountCredentials -}}
{{- $args = append $args "--use-service-account-credentials=true" -}}
{{- end -}}
{{- $args = append $args (printf "--secure-port=%d" (int $v.securePort)) -}}
{{- with include "kube-ccm.featureGates" . -}}
{{- $args = append $args (printf "--feature-gates=%s" .) -}}
{{- end -}}
{{- if $v.webhook.enabled -}}
{{- $tls := $v.webhook.tls.mountPath | trimSuffix "/" -}}
{{- $args = append $args "--webhooks=persistent-volume-label" -}}
{{- $args = append $args (printf "--webhook-secure-port=%d" (int $v.webhook.port)) -}}
{{- $args = append $args (printf "--webhook-tls-cert-file=%s/tls.crt" $tls) -}}
{{- $args = append $args (printf "--webhook-tls-private-key-file=%s/tls.key" $tls) -}}
{{- end -}}
{{- $args = append $args (printf "--v=%d" (int $v.verbosity)) -}}
{{- range $flag := keys $v.extraArgs | sortAlpha -}}
{{- $value := get $v.extraArgs $flag -}}
{{- if kindIs "float64" $value -}}
{{- $value = int64 $value -}}
{{- end -}}
{{- $args = append $args (printf "--%s=%v" $flag $value) -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}

{{/* The pod template shared by the Deployment and the DaemonSet. */}}
{{- define "kube-ccm.podTemplate" -}}
metadata:
  labels:
    {{- include "kube-ccm.selectorLabels" . | nindent 4 }}
    app.kubernetes.io/instance: {{ .Release.Name }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $secret := include "kube-ccm.cloudConfigSecret" . }}
  {{- if or .Values.podAnnotations (and $secret (not .Values.cloudConfig.existingSecret)) }}
  annotations:
    {{- if and $secret (not .Values.cloudConfig.existingSecret) }}
    # Roll the pods when the inline cloud config changes.
    checksum/cloud-config: {{ .Values.cloudConfig.content | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
spec:
  serviceAccountName: {{ include "kube-ccm.serviceAccountName" . }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  hostNetwork: {{ .Values.hostNetwork }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: cloud-controller-manager
      image: "{{ .Values.image.repository }}:{{ include "kube-ccm.imageTag" . }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["cloud-controller-manager"]
      args:
        {{- include "kube-ccm.args" . | nindent 8 }}
      {{- $env := concat (.Values.env | default list) (.Values.extraEnv | default list) }}
      {{- if .Values.servicelb.enabled }}
      {{- $forwarder := .Values.servicelb.image | default (printf "%s:%s" .Values.image.repository (include "kube-ccm.imageTag" .)) }}
      {{- $env = prepend $env (dict "name" "KUBE_CCM_SERVICELB_IMAGE" "value" $forwarder) }}
      {{- with .Values.servicelb.priorityClassName }}
      {{- $env = prepend $env (dict "name" "KUBE_CCM_SERVICELB_PRIORITY_CLASS" "value" .) }}
      {{- end }}
      {{- end }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: https
          containerPort: {{ .Values.securePort }}
        {{- if .Values.webhook.enabled }}
        - name: webhook
          containerPort: {{ .Values.webhook.port }}
        {{- end }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: {{ .Values.securePort }}
          scheme: HTTPS
        initialDelaySeconds: {{ .Values.livenessProbe.initialDelaySeconds }}
        periodSeconds: {{ .Values.livenessProbe.periodSeconds }}
        failureThreshold: {{ .Values.livenessProbe.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: {{ .Values.securePort }}
          scheme: HTTPS
        periodSeconds: {{ .Values.readinessProbe.periodSeconds }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        {{- if $secret }}
        - name: cloud-config
          mountPath: {{ .Values.cloudConfig.mountPath }}
          readOnly: true
        {{- end }}
        {{- if .Values.webhook.enabled }}
        - name: webhook-tls
          mountPath: {{ .Values.webhook.tls.mountPath }}
          readOnly: true
        {{- end }}
        {{- if .Values.libvirt.credentialsSecret }}
        - name: libvirt-credentials
          mountPath: {{ .Values.libvirt.credentialsMountPath }}
          readOnly: true
        {{- end }}
        {{- if .Values.libvirt.hostSocket }}
        # The host's libvirtd sockets (qemu:///system); connecting works on a read-only mount.
        - name: libvirt-sockets
          mountPath: /var/run/libvirt
          readOnly: true
        {{- end }}
        {{- if or .Values.proxmox.tokenSecret .Values.proxmox.caConfigMap }}
        # The proxmox provider's token secrets and PVE's CA, in one directory.
        - name: proxmox
          mountPath: {{ .Values.proxmox.mountPath }}
          readOnly: true
        {{- end }}
        - name: tmp
          mountPath: /tmp
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- if $secret }}
    - name: cloud-config
      secret:
        secretName: {{ $secret }}
    {{- end }}
    {{- if .Values.webhook.enabled }}
    - name: webhook-tls
      secret:
        secretName: {{ .Values.webhook.tls.secretName }}
    {{- end }}
    {{- with .Values.libvirt.credentialsSecret }}
    - name: libvirt-credentials
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- if .Values.libvirt.hostSocket }}
    - name: libvirt-sockets
      hostPath:
        path: /var/run/libvirt
        type: Directory
    {{- end }}
    {{- if or .Values.proxmox.tokenSecret .Values.proxmox.caConfigMap }}
    - name: proxmox
      projected:
        sources:
          {{- with .Values.proxmox.tokenSecret }}
          - secret:
              name: {{ . }}
          {{- end }}
          {{- with .Values.proxmox.caConfigMap }}
          - configMap:
              name: {{ . }}
          {{- end }}
    {{- end }}
    - name: tmp
      emptyDir: {}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
