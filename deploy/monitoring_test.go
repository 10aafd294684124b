package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The monitoring examples: a Grafana dashboard, Prometheus alert rules
// and a PodMonitor for the DaemonSet.
const (
	dashboardFile  = "deploy/monitoring/grafana-dashboard.json"
	alertsFile     = "deploy/monitoring/alerts.yaml"
	podMonitorFile = "deploy/kubernetes/podmonitor.yaml"
)

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(name)))
	require.NoError(t, err)
	return b
}

// monitoringExprs parses the dashboard and the rules and returns every
// PromQL expression in them, by where it is.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	var d dashboard
	require.NoError(t, json.Unmarshal(readRepoFile(t, dashboardFile), &d), dashboardFile)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Panels)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for i, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs[fmt.Sprintf("%s: panel %q query %d", dashboardFile, p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs[fmt.Sprintf("%s: variable %s", dashboardFile, v.Name)] = v.Definition
		}
	}

	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(readRepoFile(t, alertsFile))))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rf), alertsFile)
	require.NotEmpty(t, rf.Groups)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			if r.For != "" {
				_, err := model.ParseDuration(r.For)
				assert.NoError(t, err, "%s: for", r.Alert)
			}
			exprs[fmt.Sprintf("%s: alert %s", alertsFile, r.Alert)] = r.Expr
		}
	}
	return exprs
}

// TestMonitoringFiles: the dashboard and the rules parse, their
// expressions are balanced, and the alerts cover what an operator must
// hear about.
func TestMonitoringFiles(t *testing.T) {
	exprs := monitoringExprs(t)
	for where, e := range exprs {
		assert.NoError(t, balanced(e), "%s: %s", where, e)
	}
	want := map[string]string{ // alert topic: a metric its rule must use
		"store errors":     "ferry_store_errors_total",
		"EIO":              `ferry_fuse_errors_total{errno="EIO"}`,
		"cache hit ratio":  "rate(ferry_fs_passthrough_opened_bytes_total[30m])",
		"budget":           "ferry_readahead_budget_limit_bytes",
		"cache near floor": "ferry_cache_min_free_bytes",
	}
	for topic, m := range want {
		assert.True(t, slices.ContainsFunc(mapValues(exprs), func(e string) bool { return strings.Contains(e, m) }),
			"no alert on %s (%s)", topic, m)
	}
}

// TestPodMonitorMatchesDaemonSet: the PodMonitor selects the DaemonSet's
// pods and scrapes the port its ferry serves metrics on.
func TestPodMonitorMatchesDaemonSet(t *testing.T) {
	var pm struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(readRepoFile(t, podMonitorFile), &pm))
	assert.Equal(t, "monitoring.coreos.com/v1", pm.APIVersion)
	assert.Equal(t, "PodMonitor", pm.Kind)
	require.Len(t, pm.Spec.Endpoints, 1)
	assert.Equal(t, "/metrics", pm.Spec.Endpoints[0].Path)

	type daemonSet struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Ports []struct {
							Name string `yaml:"name"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var ds daemonSet
	dec := yaml.NewDecoder(strings.NewReader(string(readRepoFile(t, "deploy/kubernetes/daemonset.yaml"))))
	for dec.Decode(&ds) == nil && ds.Kind != "DaemonSet" {
		ds = daemonSet{}
	}
	require.Equal(t, "DaemonSet", ds.Kind)
	pod := ds.Spec.Template
	for k, v := range pm.Spec.Selector.MatchLabels {
		assert.Equal(t, v, pod.Metadata.Labels[k], "the PodMonitor's selector %s", k)
	}
	var ports []string
	for _, ct := range pod.Spec.Containers {
		for _, p := range ct.Ports {
			ports = append(ports, p.Name)
		}
	}
	assert.Contains(t, ports, pm.Spec.Endpoints[0].Port)
}

// TestMonitoringMetricsExist: every metric the dashboard and the rules
// use is one ferry exports. A real ferry (built here) mounts a directory
// with a disk cache, reads, looks up a missing name (so that the error
// families have a series) and is scraped.
func TestMonitoringMetricsExist(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	exported := scrapeFerry(t)
	names := regexp.MustCompile(`\b(?:ferry|go|process)_[a-z0-9_]+\b`)
	for where, e := range monitoringExprs(t) {
		for _, n := range names.FindAllString(e, -1) {
			assert.True(t, exported[n], "%s uses %s, which ferry does not export", where, n)
		}
	}
}

// scrapeFerry mounts with the built binary and returns the names of the
// series it exports (histograms with their _bucket, _sum and _count).
func scrapeFerry(t *testing.T) map[string]bool {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "ferry")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	src, mnt, cache := filepath.Join(tmp, "src"), filepath.Join(tmp, "mnt"), filepath.Join(tmp, "cache")
	for _, d := range []string{src, mnt, cache} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--cache-dir", cache, "--metrics-addr", addr, "--log-file", filepath.Join(tmp, "log"),
		"--control-socket", filepath.Join(tmp, "ctl.sock"), "file://"+src, mnt)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() {
		for range 50 {
			if syscall.Unmount(mnt, 0) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	_, err = os.ReadFile(filepath.Join(mnt, "f"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(mnt, "missing"))
	require.Error(t, err)

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	exported := map[string]bool{}
	for name, f := range fams {
		exported[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[name+s] = true
			}
		}
	}
	return exported
}

// balanced checks a PromQL expression's brackets and quotes.
func balanced(e string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, r := range e {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack)
	}
	return nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
