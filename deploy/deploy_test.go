package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"ferry/flags"
)

// checkedFiles are the files the checks read, relative to the repository
// root. go.mod is read for its Go version only.
var checkedFiles = []string{
	"Dockerfile",
	".dockerignore",
	"deploy/kubernetes/daemonset.yaml",
	"deploy/kubernetes/sidecar.yaml",
	"deploy/systemd/ferry@.service",
	"deploy/systemd/train.env",
	"deploy/fstab.example",
	"docs/containers.md",
	"docs/scale-out.md",
	"go.mod",
}

// manifestFiles are the Kubernetes examples; all of them are checked alike,
// and each has its own expectations in checkKubernetes.
var manifestFiles = []string{"deploy/kubernetes/daemonset.yaml", "deploy/kubernetes/sidecar.yaml"}

// foreignFlags are long flags of other tools that the files mention; every
// other --flag must be one of ferry's (flags.Options). A ferry flag renamed
// in the table makes the test fail until the examples follow.
var foreignFlags = map[string]string{
	"rm": "docker run", "device": "docker run", "cap-add": "docker run",
	"security-opt": "docker run", "privileged": "docker run", "init": "docker run",
	"stop-timeout": "docker run", "env-file": "docker run", "entrypoint": "docker run",
	"mount": "Dockerfile RUN --mount", "from": "Dockerfile COPY --from",
	"no-install-recommends": "apt-get",
	"from-file":             "kubectl create secret",
	"target":                "findmnt",
	"now":                   "systemctl enable",
	"bind":                  "mount(8)", "make-rshared": "mount(8)",
	"data": "the trainer's own flag in sidecar.yaml",
	"help": "urfave/cli's built-in help flag",
	"out":  "tools/bench in scale-out.md",
}

// wantEntrypoint is the image's entrypoint: ferry, attached, as PID 1.
var wantEntrypoint = []string{"/usr/local/bin/ferry", "--foreground"}

// memoryHeadroom is what a ferry container needs above --memory-limit: the
// Go runtime, metadata cache, connections and cache index.
const memoryHeadroom = 256 << 20

// minGracePeriod: ferry retries a busy unmount for about five seconds
// before it gives up and keeps serving.
const minGracePeriod = 10

func TestDeployFilesAreConsistent(t *testing.T) {
	c := newChecker(t, loadFiles(t))
	for _, p := range c.run() {
		t.Error(p)
	}
}

// TestChecksCatchMistakes breaks the real files one mistake at a time and
// expects the checks to name the broken file, so that none of the checks
// above passes vacuously.
func TestChecksCatchMistakes(t *testing.T) {
	files := loadFiles(t)
	require.Empty(t, newChecker(t, files).run(), "the unmodified files must pass first")

	tests := []struct {
		name, file, old, new string
	}{
		{"no fuse3", "Dockerfile", "fuse3 ca-certificates", "ca-certificates"},
		{"entrypoint without --foreground", "Dockerfile", `ENTRYPOINT ["/usr/local/bin/ferry", "--foreground"]`, `ENTRYPOINT ["/usr/local/bin/ferry"]`},
		{"shell-form entrypoint", "Dockerfile", `ENTRYPOINT ["/usr/local/bin/ferry", "--foreground"]`, `ENTRYPOINT /usr/local/bin/ferry --foreground`},
		{"no STOPSIGNAL", "Dockerfile", "STOPSIGNAL SIGTERM", ""},
		{"cgo build", "Dockerfile", "CGO_ENABLED=0 go build", "go build"},
		{"ADD of a key", "Dockerfile", "COPY . .", "COPY . .\nADD key.json /etc/key.json"},
		{"secret in ENV", "Dockerfile", "WORKDIR /src", "WORKDIR /src\nENV AWS_SECRET_ACCESS_KEY=abc"},
		{"Go version behind go.mod", "Dockerfile", "golang:1.26-bookworm", "golang:1.25-bookworm"},
		{"runtime image not slim bookworm", "Dockerfile", "FROM debian:bookworm-slim", "FROM alpine:3.20"},
		{"documented docker run without rshared", "Dockerfile", "/mnt/ferry:/mnt/ferry:rshared \\\n#     ferry", "/mnt/ferry:/mnt/ferry \\\n#     ferry"},
		{"documented docker run binds the mount point", "Dockerfile", "-v /mnt/ferry:/mnt/ferry:rshared", "-v /mnt/ferry/data:/mnt/ferry/data:rshared"},
		{"key files in the build context", ".dockerignore", "**/key.json\n", ""},
		{"sources excluded from the build context", ".dockerignore", ".git\n", ".git\n*.go\n"},

		{"invalid propagation", "deploy/kubernetes/daemonset.yaml", "mountPropagation: Bidirectional", "mountPropagation: Bidirectonal"},
		{"misspelt propagation key", "deploy/kubernetes/daemonset.yaml", "mountPropagation: Bidirectional", "mountPropogation: Bidirectional"},
		{"unprivileged DaemonSet", "deploy/kubernetes/daemonset.yaml", "privileged: true", "privileged: false"},
		{"consumer without HostToContainer", "deploy/kubernetes/daemonset.yaml", "mountPropagation: HostToContainer", "mountPropagation: None"},
		{"consumer mounts the mount point itself", "deploy/kubernetes/daemonset.yaml", "path: /var/lib/ferry/mnt\n        # OrCreate", "path: /var/lib/ferry/mnt/train\n        # OrCreate"},
		{"no memory headroom", "deploy/kubernetes/daemonset.yaml", "memory: 2304Mi", "memory: 2Gi"},
		{"GOMEMLIMIT above the container limit", "deploy/kubernetes/daemonset.yaml", "value: 2200MiB", "value: 3GiB"},
		{"unknown ferry flag", "deploy/kubernetes/daemonset.yaml", "--memory-limit 2GiB", "--memory-limt 2GiB"},
		{"bad flag value", "deploy/kubernetes/daemonset.yaml", "--metadata-ttl -1", "--metadata-ttl forever"},
		{"ferry daemonizes", "deploy/kubernetes/daemonset.yaml", "exec /usr/local/bin/ferry --foreground", "exec /usr/local/bin/ferry"},
		{"cache on the container layer", "deploy/kubernetes/daemonset.yaml", "--cache-dir /ssd/ferry", "--cache-dir /var/cache/ferry"},
		{"no preStop", "deploy/kubernetes/daemonset.yaml", `command: ["fusermount3", "-uz", "/var/lib/ferry/mnt/train"]`, `command: ["true"]`},
		{"readinessProbe passes on a dead mount", "deploy/kubernetes/daemonset.yaml", "stat -f /var/lib/ferry/mnt/train", "stat /var/lib/ferry/mnt/train"},
		{"short grace period", "deploy/kubernetes/daemonset.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 2"},
		{"key file outside a Secret", "deploy/kubernetes/daemonset.yaml", "--key-file /var/run/secrets/ferry/key.json", "--key-file /etc/key.json"},
		{"no DaemonSet", "deploy/kubernetes/daemonset.yaml", "kind: DaemonSet", "kind: Deployment"},

		{"plain init container", "deploy/kubernetes/sidecar.yaml", "          restartPolicy: Always\n", ""},
		{"inline secret", "deploy/kubernetes/sidecar.yaml", "valueFrom:\n                secretKeyRef:\n                  name: ferry-s3-credentials\n                  key: secret-access-key", "value: abc"},
		{"cache bigger than its emptyDir", "deploy/kubernetes/sidecar.yaml", "--cache-size 180GiB", "--cache-size 250GiB"},
		{"trainer without HostToContainer", "deploy/kubernetes/sidecar.yaml", "              mountPropagation: HostToContainer\n", ""},
		{"no startupProbe", "deploy/kubernetes/sidecar.yaml", "startupProbe:", "readinessProbe:"},
		{"startupProbe passes on a dead mount", "deploy/kubernetes/sidecar.yaml", "stat -f /mnt/ferry/imagenet", "stat -t /mnt/ferry/imagenet"},
		{"Secret object with data", "deploy/kubernetes/sidecar.yaml", "apiVersion: batch/v1", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  AWS_SECRET_ACCESS_KEY: abc\n---\napiVersion: batch/v1"},

		{"private mount namespace", "deploy/systemd/ferry@.service", "\nType=simple\n", "\nType=simple\nPrivateTmp=yes\n"},
		{"unit without --foreground", "deploy/systemd/ferry@.service", "ferry --foreground $FERRY_FLAGS", "ferry $FERRY_FLAGS"},
		{"unit with ExecStop", "deploy/systemd/ferry@.service", "\nType=simple\n", "\nType=simple\nExecStop=/bin/kill $MAINPID\n"},
		{"unit before the network", "deploy/systemd/ferry@.service", "After=network-online.target", "After=local-fs.target"},
		{"bad flag in the environment file", "deploy/systemd/train.env", "--memory-limit 2GiB", "--memory-limit lots"},

		{"shared cache directory", "deploy/fstab.example", "cache_dir=/ssd/ferry-val", "cache_dir=/ssd/ferry"},
		{"unknown mount option", "deploy/fstab.example", "s3_path_style", "s3_pathstyle"},
		{"fstab without _netdev", "deploy/fstab.example", "ro,_netdev,allow_other,cache_dir=/ssd/ferry,", "ro,allow_other,cache_dir=/ssd/ferry,"},

		{"docs: mount not propagated", "docs/containers.md", "-v /mnt/ferry:/mnt/ferry:rshared \\\n      ferry --cache-dir", "-v /mnt/ferry:/mnt/ferry \\\n      ferry --cache-dir"},
		{"docs: docker run binds the mount point", "docs/containers.md", "-v /mnt/ferry:/mnt/ferry:rshared \\\n      ferry --cache-dir /cache --allow-other gs://bucket /mnt/ferry/data\n\nOr", "-v /mnt/ferry/data:/mnt/ferry/data:rshared \\\n      ferry --cache-dir /cache --allow-other gs://bucket /mnt/ferry/data\n\nOr"},
		{"docs: no FUSE device", "docs/containers.md", "docker run --rm --device /dev/fuse --cap-add SYS_ADMIN", "docker run --rm --cap-add SYS_ADMIN"},
		{"docs: misspelt flag", "docs/containers.md", "--s3-path-style \\", "--s3-pathstyle \\"},
		{"docs: bad fstab option", "docs/containers.md", "metadata_ttl=-1 0 0", "metadata_ttl=never 0 0"},
		{"docs: bad mount -o", "docs/containers.md", "-o ro,cache_dir=/ssd/ferry`", "-o ro,cache-dir=/ssd/ferry`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Contains(t, files[tt.file], tt.old, "the mutation no longer applies; update the test")
			broken := make(map[string]string, len(files))
			for k, v := range files {
				broken[k] = v
			}
			broken[tt.file] = strings.Replace(files[tt.file], tt.old, tt.new, 1)
			problems := newChecker(t, broken).run()
			require.NotEmpty(t, problems)
			t.Log(strings.Join(problems, "\n"))
			assert.True(t, slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, tt.file+":") }),
				"no problem reported for %s: %q", tt.file, problems)
		})
	}
}

func loadFiles(t *testing.T) map[string]string {
	t.Helper()
	files := make(map[string]string, len(checkedFiles))
	for _, f := range checkedFiles {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f)))
		require.NoError(t, err)
		files[f] = string(b)
	}
	return files
}

// checker collects every problem of a set of files rather than stopping at
// the first one, so one run shows all that is wrong.
type checker struct {
	files map[string]string
	// keyFile is an existing file that stands in for --key-file paths,
	// which exist only where the example runs.
	keyFile  string
	problems []string
	// entrypoint is the Dockerfile's ENTRYPOINT, used for containers that
	// pass only arguments.
	entrypoint []string
}

func newChecker(t *testing.T, files map[string]string) *checker {
	key := filepath.Join(t.TempDir(), "key.json")
	require.NoError(t, os.WriteFile(key, []byte("{}"), 0o600))
	return &checker{files: files, keyFile: key}
}

func (c *checker) addf(file, format string, args ...any) {
	c.problems = append(c.problems, file+": "+fmt.Sprintf(format, args...))
}

func (c *checker) run() []string {
	c.checkDockerfile()
	c.checkDockerignore()
	c.checkFlagNames()
	for _, f := range manifestFiles {
		c.checkKubernetes(f)
	}
	c.checkSystemd()
	c.checkFstab("deploy/fstab.example", c.files["deploy/fstab.example"])
	c.checkDocs()
	return c.problems
}

// ---------------------------------------------------------------------------
// Parsing ferry command lines with the binary's own table.

// parseFerry parses ferry's arguments (flags, then SOURCE and MOUNTPOINT)
// with flags.CLIFlags and flags.FromContext, as the binary does. Examples
// put flags before the positional arguments: the binary accepts them after
// too, but that reordering lives in package main.
func (c *checker) parseFerry(args []string) (*flags.Config, error) {
	args = slices.Clone(args)
	for i, a := range args {
		switch {
		case a == "--key-file" && i+1 < len(args):
			args[i+1] = c.keyFile
		case strings.HasPrefix(a, "--key-file="):
			args[i] = "--key-file=" + c.keyFile
		}
	}
	cfg, err := parseWithTable(args)
	var oe *flags.OptionError
	if errors.As(err, &oe) && oe.Option == "memory-limit" {
		// Validation compares the limit with this machine's memory; the
		// example is meant for another machine. Check the value on its own
		// and the rest with the smallest limit.
		v, _ := flagValue(args, "memory-limit")
		n, perr := flags.ParseSize(v)
		if perr != nil || n < flags.MinMemoryLimit {
			return nil, err
		}
		args = setFlagValue(args, "memory-limit", strconv.Itoa(flags.MinMemoryLimit))
		if cfg, err = parseWithTable(args); err == nil {
			cfg.MemoryLimit = n
		}
	}
	return cfg, err
}

func parseWithTable(args []string) (*flags.Config, error) {
	var cfg *flags.Config
	app := &cli.App{
		Name:           "ferry",
		Flags:          flags.CLIFlags(),
		Writer:         io.Discard,
		ErrWriter:      io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(ctx *cli.Context) error {
			var err error
			cfg, err = flags.FromContext(ctx)
			return err
		},
	}
	if err := app.Run(append([]string{"ferry"}, args...)); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("not a mount command line")
	}
	return cfg, nil
}

// flagValue finds --name VALUE or --name=VALUE.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func setFlagValue(args []string, name, value string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--"+name && i+1 < len(out) {
			out[i+1] = value
		} else if strings.HasPrefix(a, "--"+name+"=") {
			out[i] = "--" + name + "=" + value
		}
	}
	return out
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// ---------------------------------------------------------------------------
// Dockerfile and .dockerignore.

type dockerInstruction struct {
	cmd, args string
}

type dockerStage struct {
	image, name string
	instrs      []dockerInstruction
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments as Docker does (a comment line
// inside a continuation is dropped too).
func parseDockerfile(text string) []dockerStage {
	var (
		stages []dockerStage
		cur    strings.Builder
	)
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			var st dockerStage
			fields := strings.Fields(in.args)
			for i := 0; i < len(fields); i++ {
				switch {
				case strings.HasPrefix(fields[i], "--"):
				case strings.EqualFold(fields[i], "AS") && i+1 < len(fields):
					st.name = fields[i+1]
					i++
				case st.image == "":
					st.image = fields[i]
				}
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			stages = append(stages, dockerStage{})
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

var secretNameRE = regexp.MustCompile(`(?i)secret|password|passwd|token|credential|private_?key|access_?key|api_?key`)

// secretFileRE matches file names that hold credentials.
var secretFileRE = regexp.MustCompile(`(?i)(^|/)(key\.json|[^/]*-key\.json|credentials(\.json)?|application_default_credentials\.json|service-account[^/]*\.json|\.env|\.aws|[^/]*\.pem|[^/]*\.p12|[^/]*\.key)$`)

func goModVersion(gomod string) string {
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if m == nil {
		return ""
	}
	return m[1]
}

func (c *checker) checkDockerfile() {
	const file = "Dockerfile"
	stages := parseDockerfile(c.files[file])
	if len(stages) < 2 {
		c.addf(file, "want a multi-stage build (Go build stage, runtime stage), got %d stage(s)", len(stages))
		return
	}
	build, final := stages[0], stages[len(stages)-1]

	if v := goModVersion(c.files["go.mod"]); v == "" || !strings.HasPrefix(build.image, "golang:"+v) || !strings.Contains(build.image, "bookworm") {
		c.addf(file, "build stage is %q, want golang:%s on bookworm (go.mod says go %s)", build.image, v, v)
	}
	if final.image != "debian:bookworm-slim" {
		c.addf(file, "runtime stage is %q, want debian:bookworm-slim", final.image)
	}
	if !slices.ContainsFunc(build.instrs, func(in dockerInstruction) bool {
		return in.cmd == "RUN" && strings.Contains(in.args, "CGO_ENABLED=0 go build") &&
			strings.Contains(in.args, "-trimpath") && strings.Contains(in.args, `-ldflags "-s -w"`)
	}) {
		c.addf(file, `build stage needs RUN ... CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" (a static binary)`)
	}

	var apt *dockerInstruction
	for i, in := range final.instrs {
		if in.cmd == "RUN" && strings.Contains(in.args, "apt-get install") {
			apt = &final.instrs[i]
		}
	}
	if apt == nil {
		c.addf(file, "runtime stage installs nothing with apt-get; it needs fuse3 and ca-certificates")
	} else {
		words := strings.Fields(apt.args)
		for _, w := range []string{"fuse3", "ca-certificates", "--no-install-recommends"} {
			if !slices.Contains(words, w) {
				c.addf(file, "apt-get install lacks %s", w)
			}
		}
		for _, s := range []string{"apt-get update", "rm -rf /var/lib/apt/lists"} {
			if !strings.Contains(apt.args, s) {
				c.addf(file, "the apt-get RUN lacks %q (one layer: update, install, clean)", s)
			}
		}
	}
	if !slices.ContainsFunc(final.instrs, func(in dockerInstruction) bool {
		return in.cmd == "COPY" && build.name != "" && strings.Contains(in.args, "--from="+build.name) &&
			strings.HasSuffix(in.args, " /usr/local/bin/ferry")
	}) {
		c.addf(file, "runtime stage must COPY --from=%s the binary to /usr/local/bin/ferry", build.name)
	}
	if !slices.ContainsFunc(final.instrs, func(in dockerInstruction) bool {
		return in.cmd == "RUN" && (strings.Contains(in.args, "install-helper") || strings.Contains(in.args, "/sbin/mount.ferry"))
	}) {
		c.addf(file, "runtime stage must install /sbin/mount.ferry (ferry install-helper)")
	}

	var entrypoints, stopsignals int
	for si, st := range stages {
		for _, in := range st.instrs {
			switch in.cmd {
			case "ENTRYPOINT":
				entrypoints++
				var ep []string
				if si != len(stages)-1 {
					c.addf(file, "ENTRYPOINT belongs in the runtime stage")
				} else if err := json.Unmarshal([]byte(in.args), &ep); err != nil {
					c.addf(file, "ENTRYPOINT %s is not exec form (JSON): a shell would be PID 1 and swallow SIGTERM", in.args)
				} else if !slices.Equal(ep, wantEntrypoint) {
					c.addf(file, "ENTRYPOINT is %q, want %q", ep, wantEntrypoint)
				} else {
					c.entrypoint = ep
				}
			case "CMD":
				var cmd []string
				if err := json.Unmarshal([]byte(in.args), &cmd); err != nil {
					c.addf(file, "CMD %s is not exec form: shell form would pass /bin/sh -c to ferry", in.args)
				}
			case "STOPSIGNAL":
				stopsignals++
				if si != len(stages)-1 || (in.args != "SIGTERM" && in.args != "15") {
					c.addf(file, "STOPSIGNAL %s: ferry unmounts on SIGTERM", in.args)
				}
			case "ADD":
				c.addf(file, "ADD %s: use COPY (ADD fetches URLs and unpacks archives, an easy way to bake in a secret)", in.args)
			case "ENV", "ARG":
				name, _, _ := strings.Cut(in.args, "=")
				name, _, _ = strings.Cut(name, " ")
				if secretNameRE.MatchString(name) {
					c.addf(file, "%s %s: credentials are given at run time, never built into the image", in.cmd, name)
				}
			case "COPY":
				for _, src := range strings.Fields(in.args) {
					if secretFileRE.MatchString(src) {
						c.addf(file, "COPY %s: credentials are given at run time, never built into the image", src)
					}
				}
			}
			for _, env := range []string{"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS"} {
				if strings.Contains(in.args, env) {
					c.addf(file, "%s %s: credentials are given at run time, never built into the image", in.cmd, env)
				}
			}
		}
	}
	if entrypoints != 1 {
		c.addf(file, "want exactly one ENTRYPOINT, got %d", entrypoints)
	}
	if stopsignals != 1 {
		c.addf(file, "want exactly one STOPSIGNAL (SIGTERM), got %d", stopsignals)
	}

	// The docker run examples in the comments.
	var comments []string
	for _, line := range strings.Split(c.files[file], "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok {
			comments = append(comments, rest)
		}
	}
	ran := 0
	for _, cmd := range joinContinuations(comments) {
		if strings.HasPrefix(strings.TrimSpace(cmd), "docker run ") {
			ran++
			c.checkDockerRun(file, cmd)
		}
	}
	if ran == 0 {
		c.addf(file, "the comments should show how to run the image (docker run ...)")
	}
}

// ignoreMatches reports whether a .dockerignore pattern excludes name.
func ignoreMatches(pattern, name string) bool {
	pattern = strings.TrimPrefix(pattern, "/")
	candidates := []string{name}
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		// **/x matches x at any depth.
		pattern = rest
		parts := strings.Split(name, "/")
		for i := 1; i < len(parts); i++ {
			candidates = append(candidates, strings.Join(parts[i:], "/"))
		}
	}
	for _, cand := range candidates {
		if ok, _ := path.Match(pattern, cand); ok {
			return true
		}
		if cand == pattern || strings.HasPrefix(cand, pattern+"/") {
			return true
		}
	}
	return false
}

func (c *checker) checkDockerignore() {
	const file = ".dockerignore"
	var patterns []string
	for _, line := range strings.Split(c.files[file], "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			c.addf(file, "%s: no exceptions; keep the file a plain deny list that the test can read", line)
			continue
		}
		patterns = append(patterns, line)
	}
	excluded := func(name string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return ignoreMatches(p, name) })
	}
	for _, name := range []string{".git", "key.json", "deploy/key.json", ".env", "certs/server.pem", ".aws/credentials", "sa-key.json"} {
		if !excluded(name) {
			c.addf(file, "%s is not excluded from the build context", name)
		}
	}
	for _, name := range []string{"go.mod", "go.sum", "main.go", "flags/table.go", "bucket/s3/s3.go"} {
		if excluded(name) {
			c.addf(file, "%s is excluded, but the build needs it", name)
		}
	}
}

// docker run flags that take a value (the ones the examples may use).
var dockerValueFlags = map[string]bool{
	"-v": true, "--volume": true, "--device": true, "--cap-add": true, "--security-opt": true,
	"--entrypoint": true, "--env-file": true, "-e": true, "--env": true, "--stop-timeout": true,
	"-p": true, "--publish": true, "--name": true, "--network": true,
}

// checkDockerRun checks a documented `docker run ... IMAGE ARGS`: ARGS must
// parse as ferry's (after the image's entrypoint), the container must be
// able to mount FUSE, and the mount must reach the host.
func (c *checker) checkDockerRun(file, line string) {
	tokens := strings.Fields(line)
	if i := slices.Index(tokens, "run"); i >= 0 {
		tokens = tokens[i+1:]
	}
	type volume struct{ dst, opts string }
	var (
		vols                                 []volume
		privileged, fuseDev, sysAdmin, other bool
		rest                                 []string
		image                                string
	)
	for i := 0; i < len(tokens); i++ {
		tok := tokens[i]
		if !strings.HasPrefix(tok, "-") {
			image, rest = tok, tokens[i+1:]
			break
		}
		name, val, hasVal := strings.Cut(tok, "=")
		if dockerValueFlags[name] && !hasVal && i+1 < len(tokens) {
			val = tokens[i+1]
			i++
		}
		switch name {
		case "-v", "--volume":
			parts := strings.Split(val, ":")
			if len(parts) >= 2 {
				v := volume{dst: parts[1]}
				if len(parts) > 2 {
					v.opts = parts[2]
				}
				vols = append(vols, v)
			}
		case "--privileged":
			privileged = true
		case "--device":
			fuseDev = fuseDev || strings.HasPrefix(val, "/dev/fuse")
		case "--cap-add":
			sysAdmin = sysAdmin || strings.EqualFold(strings.TrimPrefix(val, "CAP_"), "SYS_ADMIN")
		case "--entrypoint":
			other = true // not a mount: nothing to check
		}
	}
	if other {
		return
	}
	if image == "" {
		c.addf(file, "docker run without an image: %s", line)
		return
	}
	if !privileged && !(fuseDev && sysAdmin) {
		c.addf(file, "%s: needs --device /dev/fuse and --cap-add SYS_ADMIN, or --privileged", line)
	}
	if len(c.entrypoint) == 0 {
		return // the Dockerfile's own problem, reported there
	}
	args := append(slices.Clone(c.entrypoint[1:]), rest...)
	cfg, err := c.parseFerry(args)
	if err != nil {
		c.addf(file, "%s: ferry %s: %v", line, strings.Join(args, " "), err)
		return
	}
	var mountVol, cacheVol *volume
	for i := range vols {
		if under(cfg.MountPoint, vols[i].dst) && (mountVol == nil || len(vols[i].dst) > len(mountVol.dst)) {
			mountVol = &vols[i]
		}
		if cfg.CacheDir != "" && under(cfg.CacheDir, vols[i].dst) {
			cacheVol = &vols[i]
		}
	}
	if mountVol == nil || !slices.Contains(strings.Split(mountVol.opts, ","), "rshared") {
		c.addf(file, "%s: the mount point %s must be in a volume with :rshared, or the host never sees the mount", line, cfg.MountPoint)
	} else if path.Clean(mountVol.dst) == path.Clean(cfg.MountPoint) {
		// A killed ferry leaves a dead mount on the host, which the next
		// container gets as this volume: its ferry would mount on the
		// container's copy, where the host never sees it.
		c.addf(file, "%s: bind the parent of the mount point %s, not the mount point itself, or a ferry restarted after a crash mounts where the host never sees it", line, cfg.MountPoint)
	}
	if cfg.CacheDir != "" && cacheVol == nil {
		c.addf(file, "%s: --cache-dir %s is in the container's writable layer; mount a host SSD there", line, cfg.CacheDir)
	}
}

// joinContinuations joins lines ending in a backslash with the next ones.
func joinContinuations(lines []string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for _, l := range lines {
		if body, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(strings.TrimSpace(body) + " ")
			continue
		}
		cur.WriteString(strings.TrimSpace(l))
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// ---------------------------------------------------------------------------
// Flag names everywhere.

var longFlagRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

func (c *checker) checkFlagNames() {
	for _, file := range checkedFiles {
		if file == "go.mod" || file == ".dockerignore" {
			continue
		}
		for _, m := range longFlagRE.FindAllStringSubmatch(c.files[file], -1) {
			name := m[1]
			if o, ok := flags.Lookup(name); ok && o.Name == name {
				continue
			}
			if _, ok := foreignFlags[name]; ok {
				continue
			}
			c.addf(file, "--%s is not a ferry flag (flags/table.go) nor a known flag of another tool (foreignFlags in deploy_test.go)", name)
		}
	}
}

// ---------------------------------------------------------------------------
// Kubernetes.

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Pod      podSpec `yaml:",inline"`
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	Data       map[string]any `yaml:"data"`
	StringData map[string]any `yaml:"stringData"`
}

type podSpec struct {
	InitContainers                []container `yaml:"initContainers"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []volume    `yaml:"volumes"`
	TerminationGracePeriodSeconds *int64      `yaml:"terminationGracePeriodSeconds"`
}

type container struct {
	Name            string        `yaml:"name"`
	Image           string        `yaml:"image"`
	Command         []string      `yaml:"command"`
	Args            []string      `yaml:"args"`
	Env             []envVar      `yaml:"env"`
	VolumeMounts    []volumeMount `yaml:"volumeMounts"`
	RestartPolicy   string        `yaml:"restartPolicy"`
	SecurityContext *struct {
		Privileged *bool `yaml:"privileged"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	StartupProbe   *probe     `yaml:"startupProbe"`
	ReadinessProbe *probe     `yaml:"readinessProbe"`
	Lifecycle      *lifecycle `yaml:"lifecycle"`
}

type lifecycle struct {
	PreStop *probe `yaml:"preStop"`
}

// probe is the exec part of a probe or a lifecycle handler.
type probe struct {
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

func (p *probe) command() string {
	if p == nil || p.Exec == nil {
		return ""
	}
	return strings.Join(p.Exec.Command, " ")
}

type envVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type volumeMount struct {
	Name             string `yaml:"name"`
	MountPath        string `yaml:"mountPath"`
	MountPropagation string `yaml:"mountPropagation"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
	} `yaml:"hostPath"`
	EmptyDir *struct {
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
}

func (p *podSpec) volume(name string) *volume {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}

// mountFor is the volume mount of ct that holds p (the deepest one).
func mountFor(ct *container, p string) *volumeMount {
	var best *volumeMount
	for i := range ct.VolumeMounts {
		vm := &ct.VolumeMounts[i]
		if under(p, vm.MountPath) && (best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = vm
		}
	}
	return best
}

func (ct *container) privileged() bool {
	return ct.SecurityContext != nil && ct.SecurityContext.Privileged != nil && *ct.SecurityContext.Privileged
}

func (ct *container) env(name string) (string, bool) {
	for _, e := range ct.Env {
		if e.Name == name && e.Value != nil {
			return *e.Value, true
		}
	}
	return "", false
}

var validPropagation = []string{"", "None", "HostToContainer", "Bidirectional"}

// ferryInPod is a container that runs ferry, with its parsed command line.
type ferryInPod struct {
	where string
	obj   *k8sObject
	pod   *podSpec
	ct    *container
	init  bool
	cfg   *flags.Config
	// nodeMount is the mount point's path on the node when it is in a
	// hostPath volume.
	nodeMount string
}

func (c *checker) checkKubernetes(file string) {
	var objs []*k8sObject
	dec := yaml.NewDecoder(strings.NewReader(c.files[file]))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.addf(file, "not YAML: %v", err)
			return
		}
		c.checkKeys(file, &node)
		obj := new(k8sObject)
		if err := node.Decode(obj); err != nil {
			c.addf(file, "%v", err)
			return
		}
		objs = append(objs, obj)
	}

	var ferries []*ferryInPod
	for _, obj := range objs {
		if obj.Kind == "Secret" && (len(obj.Data) > 0 || len(obj.StringData) > 0) {
			c.addf(file, "Secret %s carries data: examples reference Secrets created out of band, never inline credentials", obj.Metadata.Name)
		}
		pod := &obj.Spec.Template.Spec
		if obj.Kind == "Pod" {
			pod = &obj.Spec.Pod
		}
		all := make([]*container, 0, len(pod.InitContainers)+len(pod.Containers))
		for i := range pod.InitContainers {
			all = append(all, &pod.InitContainers[i])
		}
		for i := range pod.Containers {
			all = append(all, &pod.Containers[i])
		}
		for i, ct := range all {
			where := fmt.Sprintf("%s %s, container %s", obj.Kind, obj.Metadata.Name, ct.Name)
			c.checkContainer(file, where, pod, ct)
			if f := c.checkFerryContainer(file, where, obj, pod, ct, i < len(pod.InitContainers)); f != nil {
				ferries = append(ferries, f)
			}
		}
	}

	for _, f := range ferries {
		c.checkConsumers(file, f, objs)
	}

	switch path.Base(file) {
	case "daemonset.yaml":
		if !slices.ContainsFunc(ferries, func(f *ferryInPod) bool {
			return f.obj.Kind == "DaemonSet" && !f.init && f.nodeMount != ""
		}) {
			c.addf(file, "want a DaemonSet whose ferry container (with a valid command line) mounts into a hostPath volume")
		}
	case "sidecar.yaml":
		if !slices.ContainsFunc(ferries, func(f *ferryInPod) bool { return f.init }) {
			c.addf(file, "want ferry as a native sidecar (an init container with restartPolicy: Always)")
		}
	}
}

// checkKeys catches misspelt mountPropagation keys, which the API server
// would reject (or, with lenient clients, drop) but a subset struct would
// silently skip.
func (c *checker) checkKeys(file string, n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if k != "mountPropagation" && editDistance(strings.ToLower(k), "mountpropagation") <= 3 {
				c.addf(file, "line %d: %q is not a Kubernetes field (mountPropagation)", n.Content[i].Line, k)
			}
		}
	}
	for _, child := range n.Content {
		c.checkKeys(file, child)
	}
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkContainer holds the rules for every container, ferry or not.
func (c *checker) checkContainer(file, where string, pod *podSpec, ct *container) {
	for _, vm := range ct.VolumeMounts {
		if !slices.Contains(validPropagation, vm.MountPropagation) {
			c.addf(file, "%s: mountPropagation %q is not one of None, HostToContainer, Bidirectional", where, vm.MountPropagation)
		}
		if vm.MountPropagation == "Bidirectional" && !ct.privileged() {
			c.addf(file, "%s: Bidirectional propagation is only allowed in a privileged container", where)
		}
		if pod.volume(vm.Name) == nil {
			c.addf(file, "%s: volume %q is not declared", where, vm.Name)
		}
	}
	for _, e := range ct.Env {
		if !secretNameRE.MatchString(e.Name) {
			continue
		}
		if e.Value != nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			c.addf(file, "%s: %s must come from a Secret (valueFrom.secretKeyRef), never inline", where, e.Name)
		}
	}
}

// ferryArgs returns ferry's arguments if ct runs ferry: directly, through
// the image's entrypoint, or as `exec ferry ...` in a sh -c script.
func (c *checker) ferryArgs(ct *container) (args []string, ok bool, err error) {
	full := append(slices.Clone(ct.Command), ct.Args...)
	if len(ct.Command) == 0 {
		name := path.Base(ct.Image)
		name, _, _ = strings.Cut(name, ":")
		if !strings.HasPrefix(name, "ferry") {
			return nil, false, nil
		}
		ep := c.entrypoint
		if len(ep) == 0 {
			ep = wantEntrypoint // the Dockerfile's own problem, reported there
		}
		full = append(slices.Clone(ep), ct.Args...)
	}
	if len(full) == 3 && path.Base(full[0]) == "sh" && full[1] == "-c" {
		for _, line := range joinContinuations(strings.Split(full[2], "\n")) {
			fields := strings.Fields(line)
			if len(fields) > 0 && fields[0] == "exec" {
				fields = fields[1:]
			}
			if len(fields) == 0 || path.Base(fields[0]) != "ferry" {
				continue
			}
			for _, f := range fields {
				if strings.ContainsAny(f, "\"'$`") {
					return nil, true, fmt.Errorf("%q: write literal values, so that the command line can be checked", f)
				}
			}
			return fields[1:], true, nil
		}
		return nil, false, nil
	}
	if len(full) > 0 && path.Base(full[0]) == "ferry" {
		return full[1:], true, nil
	}
	return nil, false, nil
}

func (c *checker) checkFerryContainer(file, where string, obj *k8sObject, pod *podSpec, ct *container, init bool) *ferryInPod {
	args, ok, err := c.ferryArgs(ct)
	if !ok {
		return nil
	}
	if err != nil {
		c.addf(file, "%s: %v", where, err)
		return nil
	}
	cfg, err := c.parseFerry(args)
	if err != nil {
		c.addf(file, "%s: ferry %s: %v", where, strings.Join(args, " "), err)
		return nil
	}
	f := &ferryInPod{where: where, obj: obj, pod: pod, ct: ct, init: init, cfg: cfg}
	if !cfg.Foreground {
		c.addf(file, "%s: ferry needs --foreground in a container, or it forks and the container exits", where)
	}
	if !ct.privileged() {
		c.addf(file, "%s: ferry must be privileged (FUSE mount and Bidirectional propagation)", where)
	}

	// The mount point: strictly below a Bidirectional volume mount.
	vm := mountFor(ct, cfg.MountPoint)
	switch {
	case vm == nil:
		c.addf(file, "%s: mount point %s is in no volume: nobody else would see the mount", where, cfg.MountPoint)
	case vm.MountPropagation != "Bidirectional":
		c.addf(file, "%s: the volume holding mount point %s needs mountPropagation: Bidirectional", where, cfg.MountPoint)
	case path.Clean(vm.MountPath) == path.Clean(cfg.MountPoint):
		c.addf(file, "%s: mount in a subdirectory of volume %s, not on it, so that remounts reach running readers", where, vm.Name)
	default:
		if v := pod.volume(vm.Name); v != nil && v.HostPath != nil {
			f.nodeMount = path.Join(v.HostPath.Path, strings.TrimPrefix(cfg.MountPoint, vm.MountPath))
		}
	}

	// The cache: in a volume, within its size limit.
	if cfg.CacheDir != "" {
		cvm := mountFor(ct, cfg.CacheDir)
		if cvm == nil {
			c.addf(file, "%s: --cache-dir %s is in the container's writable layer; use a local-SSD volume", where, cfg.CacheDir)
		} else if v := pod.volume(cvm.Name); v != nil && v.EmptyDir != nil && v.EmptyDir.SizeLimit != "" {
			limit, err := parseQuantity(v.EmptyDir.SizeLimit)
			if err != nil {
				c.addf(file, "%s: sizeLimit: %v", where, err)
			} else if cfg.CacheSize <= 0 || cfg.CacheSize >= limit {
				c.addf(file, "%s: --cache-size must be set below the cache volume's sizeLimit %s, or the kubelet evicts the pod", where, v.EmptyDir.SizeLimit)
			}
		}
	}

	// A key file: only from a Secret volume.
	if kf, ok := flagValue(args, "key-file"); ok {
		kvm := mountFor(ct, kf)
		if kvm == nil || pod.volume(kvm.Name) == nil || pod.volume(kvm.Name).Secret == nil {
			c.addf(file, "%s: --key-file %s must be in a volume from a Secret", where, kf)
		}
	}

	// Memory: the limit covers --memory-limit plus headroom.
	limit, err := parseQuantity(ct.Resources.Limits["memory"])
	switch {
	case err != nil:
		c.addf(file, "%s: resources.limits.memory: %v", where, err)
	case limit < cfg.MemoryLimit+memoryHeadroom:
		c.addf(file, "%s: memory limit %s is below --memory-limit (%d MiB) + %d MiB headroom", where,
			ct.Resources.Limits["memory"], cfg.MemoryLimit>>20, memoryHeadroom>>20)
	default:
		if ct.Resources.Requests["memory"] != ct.Resources.Limits["memory"] {
			c.addf(file, "%s: request the memory limit (%s), so that it is reserved", where, ct.Resources.Limits["memory"])
		}
		if v, ok := ct.env("GOMEMLIMIT"); ok {
			n, err := parseGoMemLimit(v)
			if err != nil || n <= cfg.MemoryLimit || n >= limit {
				c.addf(file, "%s: GOMEMLIMIT %s must lie between --memory-limit and the container's memory limit", where, v)
			}
		}
	}

	// Start and stop.
	if !strings.Contains(ct.Lifecycle.preStopCommand(), cfg.MountPoint) {
		c.addf(file, "%s: needs a preStop that detaches %s (fusermount3 -uz)", where, cfg.MountPoint)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < minGracePeriod {
		c.addf(file, "%s: set terminationGracePeriodSeconds to at least %d: ferry retries a busy unmount for ~5 s", where, minGracePeriod)
	}
	probe := ct.ReadinessProbe
	if init {
		probe = ct.StartupProbe
		if ct.RestartPolicy != "Always" {
			c.addf(file, "%s: ferry as an init container needs restartPolicy: Always (a native sidecar); a plain init container never finishes", where)
		}
		if ct.StartupProbe == nil {
			c.addf(file, "%s: a native sidecar needs a startupProbe on the mount, or the trainer starts before it", where)
		}
	}
	if !strings.Contains(probe.command(), cfg.MountPoint) {
		c.addf(file, "%s: the %s probe should check the mount point %s", where, map[bool]string{true: "startup", false: "readiness"}[init], cfg.MountPoint)
	}
	if !strings.Contains(probe.command(), "stat -f ") {
		// A dead mount answers stat from the kernel's attribute cache
		// (for ever with --metadata-ttl -1); statfs always asks ferry.
		c.addf(file, "%s: the %s probe should ask statfs (stat -f): plain stat passes on a dead mount", where, map[bool]string{true: "startup", false: "readiness"}[init])
	}
	return f
}

func (l *lifecycle) preStopCommand() string {
	if l == nil {
		return ""
	}
	return l.PreStop.command()
}

// checkConsumers checks the readers of a ferry mount: in the same pod they
// share its volume; elsewhere they mount the node's hostPath. Either way
// they need HostToContainer, and there must be at least one.
func (c *checker) checkConsumers(file string, f *ferryInPod, objs []*k8sObject) {
	vm := mountFor(f.ct, f.cfg.MountPoint)
	if vm == nil {
		return
	}
	consumers := 0
	for _, obj := range objs {
		pod := &obj.Spec.Template.Spec
		if obj.Kind == "Pod" {
			pod = &obj.Spec.Pod
		}
		for _, cts := range [][]container{pod.InitContainers, pod.Containers} {
			for i := range cts {
				ct := &cts[i]
				if ct == f.ct {
					continue
				}
				for _, m := range ct.VolumeMounts {
					v := pod.volume(m.Name)
					if v == nil {
						continue
					}
					var reads bool
					switch {
					case pod == f.pod:
						reads = m.Name == vm.Name
					case f.nodeMount != "" && v.HostPath != nil:
						if path.Clean(v.HostPath.Path) == path.Clean(f.nodeMount) {
							c.addf(file, "%s %s, container %s: mount the parent of %s, not the mount point, so that remounts reach it", obj.Kind, obj.Metadata.Name, ct.Name, f.nodeMount)
						}
						reads = under(f.nodeMount, v.HostPath.Path)
					}
					if !reads {
						continue
					}
					consumers++
					if m.MountPropagation != "HostToContainer" && m.MountPropagation != "Bidirectional" {
						c.addf(file, "%s %s, container %s: reads ferry's mount through %s without mountPropagation: HostToContainer, so it sees an empty directory",
							obj.Kind, obj.Metadata.Name, ct.Name, m.Name)
					}
				}
			}
		}
	}
	if consumers == 0 {
		c.addf(file, "%s: no container reads the mount (want an example consumer with HostToContainer)", f.where)
	}
}

// parseQuantity parses the Kubernetes quantities the examples use: an
// integer with an optional binary (Ki..Ti) or decimal (k..T) suffix.
func parseQuantity(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("quantity %q: %w", s, err)
			}
			return v * u.mult, nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", s, err)
	}
	return v, nil
}

// parseGoMemLimit parses GOMEMLIMIT's syntax: bytes with an optional
// B, KiB, MiB, GiB or TiB suffix.
func parseGoMemLimit(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// ---------------------------------------------------------------------------
// systemd.

// parseUnit reads a unit file into section -> key -> values.
func parseUnit(text string) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	section := ""
	for _, line := range joinContinuations(strings.Split(text, "\n")) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && section != "" {
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// sandboxing gives a service a private mount namespace (or cuts it off the
// network): a mount made inside would be invisible to everyone else.
var sandboxing = []string{
	"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateNetwork",
	"ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths",
	"TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths", "MountFlags", "RootDirectory", "RootImage",
	"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
	"ProtectProc", "ProcSubset", "DynamicUser",
}

func (c *checker) checkSystemd() {
	const file, envFile = "deploy/systemd/ferry@.service", "deploy/systemd/train.env"
	unit := parseUnit(c.files[file])
	svc := unit["Service"]
	if svc == nil {
		c.addf(file, "no [Service] section")
		return
	}
	want := map[string]string{"Type": "simple", "Restart": "on-failure"}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			c.addf(file, "%s=%q, want %s", k, got, v)
		}
	}
	for _, k := range []string{"After", "Wants"} {
		if !slices.ContainsFunc(unit["Unit"][k], func(v string) bool { return slices.Contains(strings.Fields(v), "network-online.target") }) {
			c.addf(file, "[Unit] needs %s=network-online.target: ferry checks the bucket before mounting", k)
		}
	}
	if len(svc["ExecStop"]) > 0 {
		c.addf(file, "no ExecStop: systemd's SIGTERM makes ferry unmount and exit")
	}
	for _, k := range sandboxing {
		if len(svc[k]) > 0 {
			c.addf(file, "%s= puts ferry in a private mount namespace (or off the network): the mount would be invisible outside", k)
		}
	}

	// ExecStart, with the example environment file substituted.
	if len(svc["ExecStart"]) != 1 {
		c.addf(file, "want one ExecStart, got %d", len(svc["ExecStart"]))
		return
	}
	env := map[string]string{}
	for _, line := range strings.Split(c.files[envFile], "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			c.addf(envFile, "%q is not KEY=VALUE", line)
			continue
		}
		env[k] = strings.Trim(v, `"`)
	}
	fields := strings.Fields(svc["ExecStart"][0])
	if len(fields) < 2 || fields[0] != wantEntrypoint[0] || fields[1] != "--foreground" {
		c.addf(file, "ExecStart must be %s --foreground ... (Type=simple supervises the serving process)", wantEntrypoint[0])
		return
	}
	var args []string
	for _, f := range fields[1:] {
		switch {
		case strings.HasPrefix(f, "${") && strings.HasSuffix(f, "}"):
			v, ok := env[f[2:len(f)-1]]
			if !ok {
				c.addf(envFile, "does not set %s, which ExecStart uses", f)
			}
			args = append(args, v)
		case strings.HasPrefix(f, "$"):
			v, ok := env[f[1:]]
			if !ok {
				c.addf(envFile, "does not set %s, which ExecStart uses", f)
			}
			args = append(args, strings.Fields(v)...)
		default:
			args = append(args, f)
		}
	}
	if _, err := c.parseFerry(args); err != nil {
		c.addf(envFile, "ferry %s: %v", strings.Join(args, " "), err)
	}
}

// ---------------------------------------------------------------------------
// fstab.

// checkFstab checks fstab entries: the type is ferry, the options parse as
// mount.ferry parses them, and each mount has its own cache directory.
func (c *checker) checkFstab(file, text string) {
	entries := 0
	cacheDirs := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		entries++
		c.checkFstabEntry(file, line, cacheDirs)
	}
	if entries == 0 {
		c.addf(file, "no fstab entries")
	}
}

func (c *checker) checkFstabEntry(file, line string, cacheDirs map[string]string) {
	f := strings.Fields(line)
	if len(f) != 6 || f[2] != "ferry" {
		c.addf(file, "%q: want SOURCE MOUNTPOINT ferry OPTIONS 0 0", line)
		return
	}
	if !slices.Contains(strings.Split(f[3], ","), "_netdev") {
		c.addf(file, "%s: add _netdev, so that it is mounted after the network", f[1])
	}
	args, err := flags.ParseMountOptions(f[3])
	if err != nil {
		c.addf(file, "%s: %v", f[1], err)
		return
	}
	cfg, err := c.parseFerry(append(args, "--", f[0], f[1]))
	if err != nil {
		c.addf(file, "%s: %v", f[1], err)
		return
	}
	if cfg.CacheDir != "" {
		if other, ok := cacheDirs[cfg.CacheDir]; ok {
			c.addf(file, "%s and %s share cache_dir %s; a cache directory serves one ferry", other, f[1], cfg.CacheDir)
		}
		cacheDirs[cfg.CacheDir] = f[1]
	}
}

// ---------------------------------------------------------------------------
// docs/containers.md.

var inlineCodeRE = regexp.MustCompile("`([^`]+)`")

// checkDocs parses the commands in the code blocks (lines indented by four
// or more spaces) as the tools would: docker run, ferry, mount -t ferry,
// fstab lines; and the -o options of inline `mount -t ferry` examples.
func (c *checker) checkDocs() {
	const file = "docs/containers.md"
	var code []string
	for _, line := range strings.Split(c.files[file], "\n") {
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			code = append(code, line)
		} else {
			code = append(code, "")
		}
	}
	counts := map[string]int{}
	for _, cmd := range joinContinuations(code) {
		cmd = strings.TrimPrefix(strings.TrimSpace(cmd), "sudo ")
		fields := strings.Fields(cmd)
		switch {
		case strings.HasPrefix(cmd, "docker run "):
			counts["docker run"]++
			c.checkDockerRun(file, cmd)
		case len(fields) > 0 && fields[0] == "ferry":
			counts["ferry"]++
			if _, err := c.parseFerry(fields[1:]); err != nil {
				c.addf(file, "%s: %v", cmd, err)
			}
		case len(fields) == 6 && fields[2] == "ferry":
			counts["fstab"]++
			c.checkFstabEntry(file, cmd, map[string]string{})
		}
	}
	for _, m := range inlineCodeRE.FindAllStringSubmatch(c.files[file], -1) {
		fields := strings.Fields(strings.TrimPrefix(m[1], "sudo "))
		if len(fields) < 3 || fields[0] != "mount" || fields[1] != "-t" || fields[2] != "ferry" {
			continue
		}
		counts["mount"]++
		for i, f := range fields {
			if f == "-o" && i+1 < len(fields) {
				if _, err := flags.ParseMountOptions(fields[i+1]); err != nil {
					c.addf(file, "%s: %v", m[1], err)
				}
			}
		}
	}
	for _, k := range []string{"docker run", "ferry", "fstab", "mount"} {
		if counts[k] == 0 {
			c.addf(file, "found no %s example to check; the docs should show one", k)
		}
	}
}
