// k8s-validate reads rendered manifests (YAML documents separated by ---) on stdin and decodes each one
// strictly into its Kubernetes API type: an unknown or misspelt field, a wrong type or an unknown kind is
// an error. Prometheus Operator kinds, which are not in k8s.io/api, are checked against the fields this
// chart uses. It prints one line per object and exits 1 at the first problem.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Endpoint of a ServiceMonitor or PodMonitor: the fields the chart sets.
type monitorEndpoint struct {
	Port     string `json:"port"`
	Path     string `json:"path,omitempty"`
	Interval string `json:"interval,omitempty"`
}

type monitorSpec struct {
	Selector            metav1.LabelSelector `json:"selector"`
	Endpoints           []monitorEndpoint    `json:"endpoints,omitempty"`
	PodMetricsEndpoints []monitorEndpoint    `json:"podMetricsEndpoints,omitempty"`
}

type monitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              monitorSpec `json:"spec"`
}

func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1/Pod":
		return &corev1.Pod{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor":
		return &monitor{}, nil
	}
	return nil, fmt.Errorf("unknown kind %s %s", apiVersion, kind)
}

// check holds what strict decoding cannot see.
func check(obj any) error {
	var spec *corev1.PodSpec
	switch o := obj.(type) {
	case *appsv1.Deployment:
		spec = &o.Spec.Template.Spec
		if o.Spec.Selector == nil || len(o.Spec.Selector.MatchLabels) == 0 {
			return fmt.Errorf("a Deployment needs spec.selector.matchLabels")
		}
		for k, v := range o.Spec.Selector.MatchLabels {
			if o.Spec.Template.Labels[k] != v {
				return fmt.Errorf("the selector's %s=%s is not on the pod template", k, v)
			}
		}
	case *corev1.Pod:
		spec = &o.Spec
	case *corev1.Service:
		for _, p := range o.Spec.Ports {
			if p.Port < 1 || p.Port > 65535 {
				return fmt.Errorf("service port %d out of range", p.Port)
			}
		}
	case *monitor:
		if len(o.Spec.Endpoints)+len(o.Spec.PodMetricsEndpoints) == 0 {
			return fmt.Errorf("a monitor needs endpoints")
		}
	}
	if spec == nil {
		return nil
	}
	if len(spec.Containers) == 0 {
		return fmt.Errorf("a pod needs containers")
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for _, c := range spec.Containers {
		if c.Name == "" || c.Image == "" {
			return fmt.Errorf("a container needs a name and an image")
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if p.Name != "" && len(p.Name) > 15 {
				return fmt.Errorf("container port name %q is longer than 15 characters", p.Name)
			}
			ports[p.Name] = true
		}
		for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if probe != nil && probe.HTTPGet != nil && probe.HTTPGet.Port.StrVal != "" && !ports[probe.HTTPGet.Port.StrVal] {
				return fmt.Errorf("container %s: a probe names port %q, which it does not have", c.Name, probe.HTTPGet.Port.StrVal)
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				return fmt.Errorf("container %s mounts %q, which is not a volume", c.Name, m.Name)
			}
		}
	}
	return nil
}

func main() {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	count := 0
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("reading: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			fail("document %d: %v", count+1, err)
		}
		obj, err := newObject(meta.APIVersion, meta.Kind)
		if err != nil {
			fail("document %d: %v", count+1, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fail("%s: %v", meta.Kind, err)
		}
		name := obj.(metav1.Object).GetName()
		if name == "" {
			fail("%s without metadata.name", meta.Kind)
		}
		if err := check(obj); err != nil {
			fail("%s %s: %v", meta.Kind, name, err)
		}
		fmt.Printf("ok %s/%s %s\n", meta.APIVersion, meta.Kind, name)
		count++
	}
	if count == 0 {
		fail("no objects")
	}
}

func stripComments(doc []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "k8s-validate: "+format+"\n", args...)
	os.Exit(1)
}
