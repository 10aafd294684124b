package flags

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Where an option's value comes from, first found wins: the command line
// (for mount.ferry, the -o options), then the environment (FERRY_CACHE_DIR),
// then the --config-file (YAML, keyed by flag name), then the table's
// default.

// EnvPrefix starts the environment variable of every option.
const EnvPrefix = "FERRY_"

// Env is the option's environment variable: FERRY_ and the name in upper
// case with _ for -, "FERRY_CACHE_DIR".
func (o *Option) Env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(o.Name, "-", "_"))
}

// reservedEnv are FERRY_ variables that are no option and are not an
// error: the systemd unit's (deploy/systemd), the background child's
// marker, and the test and emulator tooling's. TestEnvNamesInRepo keeps
// this list in step with the repository.
var reservedEnv = []string{
	"FERRY_SOURCE", "FERRY_MOUNTPOINT", "FERRY_FLAGS",
	"FERRY_FAKE_GCS_SERVER", "FERRY_VERSITYGW", "FERRY_WEED", "FERRY_EMULATOR_DIR",
	"FERRY_SOAK", "FERRY_FILECACHE_CRASH_DIR",
}

// reservedEnvPrefixes: internal and test markers.
var reservedEnvPrefixes = []string{"FERRY_INTERNAL_", "FERRY_TEST_", "FERRY_E2E_"}

// source is where one value came from, for errors: "" for the command
// line, else the variable or the file.
type source struct {
	raws []string
	from string
}

// sources holds the values of the environment and of the config file.
type sources struct {
	env  map[string]source // by option name
	file map[string]source
}

// lookup is the value of option o from the environment or, failing that,
// the file.
func (s *sources) lookup(o *Option) (source, bool) {
	if v, ok := s.env[o.Name]; ok {
		return v, true
	}
	v, ok := s.file[o.Name]
	return v, ok
}

// readSources reads the FERRY_ variables of environ and the config file:
// path from the command line, else FERRY_CONFIG_FILE, else none. A
// variable or a key that names no option is an error naming it.
func readSources(environ []string, path string) (*sources, error) {
	s := &sources{env: map[string]source{}, file: map[string]source{}}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(reservedEnv, name) ||
			slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		o := envOption(name)
		if o == nil {
			return nil, fmt.Errorf("%w: environment variable %s names no option (FERRY_ and a flag name in upper case with _ for -, e.g. FERRY_CACHE_DIR; ferry --help lists them)", ErrInvalid, name)
		}
		raws := []string{val}
		if o.Kind == List {
			raws = splitList(val)
		}
		s.env[o.Name] = source{raws: raws, from: name}
	}
	if path == "" {
		if v, ok := s.env["config-file"]; ok {
			path = v.raws[0]
		}
	}
	if path == "" {
		return s, nil
	}
	var err error
	s.file, err = readConfigFile(path)
	return s, err
}

// envOption is the option whose variable is name, nil if none.
func envOption(name string) *Option {
	for i := range Options {
		if Options[i].Env() == name {
			return &Options[i]
		}
	}
	return nil
}

// splitList splits a list option's value at commas, as the command line
// does.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readConfigFile reads a YAML mapping of option names (cache-dir, or the
// fstab spelling cache_dir) to values. A value is the text a user would
// type after the flag, parsed by the same code: `metadata-ttl: -1`,
// `cache-size: 200GiB`, `file-mode: "0444"`; a list option takes a
// sequence or a comma-separated string; a switch takes true or false.
func readConfigFile(path string) (map[string]source, error) {
	fail := func(format string, args ...any) error {
		return &OptionError{Option: "config-file", Err: fmt.Errorf("%s: "+format, append([]any{path}, args...)...)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &OptionError{Option: "config-file", Err: err}
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]source{}, nil // empty file
		}
		return nil, fail("%v", err)
	}
	if len(doc.Content) == 0 {
		return map[string]source{}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fail("line %d: want a mapping of option names to values (cache-dir: /ssd/ferry)", root.Line)
	}
	out := map[string]source{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		o, ok := Lookup(k.Value)
		if !ok {
			return nil, fail("line %d: unknown key %q (keys are the flag names, e.g. cache-dir; ferry --help lists them)", k.Line, k.Value)
		}
		if o.Name == "config-file" {
			return nil, fail("line %d: config-file cannot be set in a config file", k.Line)
		}
		if _, dup := out[o.Name]; dup {
			return nil, fail("line %d: %s is set twice", k.Line, o.Name)
		}
		raws, err := nodeValues(o, v)
		if err != nil {
			return nil, fail("line %d: %s: %v", v.Line, k.Value, err)
		}
		out[o.Name] = source{raws: raws, from: "config file " + path}
	}
	return out, nil
}

// nodeValues is the text of a value node, as typed.
func nodeValues(o *Option, v *yaml.Node) ([]string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && o.Kind == List:
		return splitList(v.Value), nil
	case v.Kind == yaml.ScalarNode:
		return []string{v.Value}, nil
	case v.Kind == yaml.SequenceNode && o.Kind == List:
		var out []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("want a list of values")
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want one value, as after the flag")
}

// parseBool is a switch's value from the environment or a file (the
// command line's --flag=value is parsed by urfave/cli).
func parseBool(s string) (string, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return "", fmt.Errorf("%q is not true or false", s)
	}
	return strconv.FormatBool(b), nil
}
