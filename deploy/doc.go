// Package deploy holds example deployment files; its tests check that they
// stay consistent with the binary's flags.
//
// The files are kubernetes/ (a DaemonSet with a consumer Pod, a Job with
// ferry as a native sidecar, and a PodMonitor for the DaemonSet),
// monitoring/ (a Grafana dashboard and Prometheus alert rules, whose
// metric names the tests check against a real ferry's), systemd/ (a template unit and an example
// environment file) and fstab.example, together with the repository's
// Dockerfile and .dockerignore and docs/containers.md, which explains them.
// The tests parse every ferry command line in them with package flags, the
// same code the binary uses, and check what ferry needs from its container:
// fuse3, --foreground as PID 1, mount propagation, memory headroom above
// --memory-limit, credentials from Secrets only.
//
// The package has no code and must never gain any: nothing imports it.
package deploy
