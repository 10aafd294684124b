// Package e2e tests ferry the way users run it: it builds the binary,
// starts real fake-gcs-server and versitygw processes behind a counting
// proxy, mounts for real (background mode, mount -t ferry, fstab, a fresh
// mount namespace) and checks everything through ordinary syscalls.
//
// Its tests must never leave a mount or a process behind: every mount is
// unmounted and its daemon waited for in t.Cleanup, even on failure.
package e2e
