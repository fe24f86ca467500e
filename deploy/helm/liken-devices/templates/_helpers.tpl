{{/*
The chart holds no copy of the manifests. files/liken-devices and files/media are links to
deploy/liken-devices and deploy/media, the kustomize base; "liken.base" renders one of them as
kustomize does: the files its kustomization.yaml lists under `resources:`, one object per YAML
document (the CustomResourceDefinition left to crds/, which Helm installs first and never
deletes: rules: machine.outlives-the-install), the ConfigMaps of its configMapGenerator, and each
DaemonSet changed where a value says so ("liken.daemonset"). A missing or unreadable file fails
the render: an empty chart never installs. So does a kustomization field the chart does not
render (a patch added to deploy/ would otherwise be left out of the chart).
*/}}
{{- define "liken.base" -}}
{{- $root := .root -}}
{{- $dir := printf "files/%s" .dir -}}
{{- $k := $root.Files.Get (printf "%s/kustomization.yaml" $dir) | fromYaml -}}
{{- if not $k.resources -}}
{{- fail (printf "%s/kustomization.yaml lists no resources: the chart's link into deploy/ is missing" $dir) -}}
{{- end -}}
{{- range $field, $_ := $k }}
{{- if not (has $field (list "apiVersion" "kind" "resources" "configMapGenerator" "components")) }}
{{- fail (printf "%s/kustomization.yaml: the chart does not render its %s" $dir $field) }}
{{- end }}
{{- end }}
{{- range $c := $k.components | default list }}
{{- if ne $c "kubelet-dir" }}
{{- fail (printf "%s/kustomization.yaml: the chart does not render the component %s" $dir $c) }}
{{- end }}
{{- end }}
{{- range $file := $k.resources }}
{{- $text := $root.Files.Get (printf "%s/%s" $dir $file) }}
{{- if not $text }}
{{- fail (printf "%s/%s: missing or empty" $dir $file) }}
{{- end }}
{{- range $part := regexSplit `(?m)^---[ \t]*$` $text -1 }}
{{- $doc := fromYaml $part }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "%s/%s: %s" $dir $file $doc.Error) }}
{{- end }}
{{- if and $doc (ne (get $doc "kind") "CustomResourceDefinition") }}
{{- if eq $doc.kind "DaemonSet" }}
{{- $_ := include "liken.daemonset" (dict "ds" $doc "Values" $root.Values) }}
{{- end }}
---
{{ toYaml $doc }}
{{- end }}
{{- end }}
{{- end }}
{{- range $g := $k.configMapGenerator }}
{{- if not (and $g.options $g.options.disableNameSuffixHash) }}
{{- fail (printf "configMapGenerator %s: the chart makes only ConfigMaps without a name hash" $g.name) }}
{{- end }}
{{- $data := dict }}
{{- range $lit := $g.literals }}
{{- $kv := splitn "=" 2 $lit }}
{{- $_ := set $data $kv._0 $kv._1 }}
{{- end }}
{{- if hasKey $data "kubeletDir" }}
{{- $_ := set $data "kubeletDir" (include "liken.kubeletDir" $root.Values) }}
{{- end }}
{{- $meta := dict "name" $g.name }}
{{- with $g.namespace }}{{ $_ := set $meta "namespace" . }}{{ end }}
{{- with $g.options.labels }}{{ $_ := set $meta "labels" . }}{{ end }}
{{- with $g.options.annotations }}{{ $_ := set $meta "annotations" . }}{{ end }}
---
{{ toYaml (dict "apiVersion" "v1" "kind" "ConfigMap" "metadata" $meta "data" $data) }}
{{- end }}
{{- end -}}

{{/* The kubelet's root directory, without a trailing slash. */}}
{{- define "liken.kubeletDir" -}}
{{- $dir := trimSuffix "/" (toString .kubeletDir) -}}
{{- if not (hasPrefix "/" $dir) -}}
{{- fail (printf "kubeletDir %q: an absolute path is needed" (toString .kubeletDir)) -}}
{{- end -}}
{{- $dir -}}
{{- end -}}

{{/*
One DaemonSet of the base with the values of its program (devices: liken-devices, media:
media-capabilities): images, tolerations, node selector, priority class, resources (the
container's claims kept), the API server's address; for liken-devices also the kubelet's
directories and the upgrade strategy. Changes the object in place.
*/}}
{{- define "liken.daemonset" -}}
{{- $ds := .ds -}}
{{- $V := .Values -}}
{{- $name := $ds.metadata.name -}}
{{- $prog := dict -}}
{{- if eq $name "liken-devices" -}}
{{- $prog = $V.devices -}}
{{- else if eq $name "media-capabilities" -}}
{{- $prog = $V.media -}}
{{- else -}}
{{- fail (printf "DaemonSet %s: the chart has no values for it" $name) -}}
{{- end -}}
{{- $pod := $ds.spec.template.spec -}}
{{- range $c := $pod.containers -}}
{{- /* kustomize's `images:` names the images liken-devices and liken-media */ -}}
{{- if eq $c.image "liken-devices" -}}
{{- $_ := set $c "image" (printf "%s:%s" $V.devices.image.repository (toString $V.devices.image.tag)) -}}
{{- else if eq $c.image "liken-media" -}}
{{- $_ := set $c "image" (printf "%s:%s" $V.media.image.repository (toString $V.media.image.tag)) -}}
{{- end -}}
{{- end -}}
{{- if $prog.tolerations -}}
{{- $_ := set $pod "tolerations" $prog.tolerations -}}
{{- else -}}
{{- $_ := unset $pod "tolerations" -}}
{{- end -}}
{{- if $prog.nodeSelector -}}
{{- $_ := set $pod "nodeSelector" $prog.nodeSelector -}}
{{- else -}}
{{- $_ := unset $pod "nodeSelector" -}}
{{- end -}}
{{- if $prog.priorityClassName -}}
{{- $_ := set $pod "priorityClassName" $prog.priorityClassName -}}
{{- else -}}
{{- $_ := unset $pod "priorityClassName" -}}
{{- end -}}
{{- $c := index $pod.containers 0 -}}
{{- $res := deepCopy ($prog.resources | default dict) -}}
{{- with $c.resources -}}
{{- with .claims -}}
{{- $_ := set $res "claims" . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "resources" $res -}}
{{- with $V.apiServer.host -}}
{{- $env := $c.env | default list -}}
{{- $env = append $env (dict "name" "KUBERNETES_SERVICE_HOST" "value" (toString .)) -}}
{{- $env = append $env (dict "name" "KUBERNETES_SERVICE_PORT" "value" (toString $V.apiServer.port)) -}}
{{- $_ := set $c "env" $env -}}
{{- end -}}
{{- if eq $name "liken-devices" -}}
{{- $plugins := printf "%s/plugins" (include "liken.kubeletDir" $V) -}}
{{- range $v := $pod.volumes -}}
{{- if and (has $v.name (list "plugin-dir" "registry-dir")) $v.hostPath -}}
{{- $_ := set $v.hostPath "path" (regexReplaceAllLiteral "^.*?/plugins" $v.hostPath.path $plugins) -}}
{{- end -}}
{{- end -}}
{{- range $m := $c.volumeMounts -}}
{{- if has $m.name (list "plugin-dir" "registry-dir") -}}
{{- $_ := set $m "mountPath" (regexReplaceAllLiteral "^.*?/plugins" $m.mountPath $plugins) -}}
{{- end -}}
{{- end -}}
{{- if not $V.seamlessUpgrade -}}
{{- $_ := set $ds.spec.updateStrategy "rollingUpdate" (dict "maxSurge" 0 "maxUnavailable" 1) -}}
{{- $_ := set $c "args" (without $c.args "--seamless-upgrade") -}}
{{- end -}}
{{- end -}}
{{- end -}}
