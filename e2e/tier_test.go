package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ferry/bucket/emulator"
)

// TestTierServesTheSecondNode runs two ferry nodes, each with its own
// cache, through a real SeaweedFS whose remote storage is versitygw
// (docs/scale-out.md's recipe): node 1 fills the tier from the origin
// once, and node 2, with an empty cache, reads every byte right without
// one byte from the origin.
//
// SeaweedFS takes about 8 minutes to build, so the test runs only where
// it was built before (`go run ./tools/emulators -weed`, or a
// `bench cluster` run); elsewhere it says so and skips.
func TestTierServesTheSecondNode(t *testing.T) {
	weed, err := emulator.Built(emulator.Weed)
	if err != nil && !errors.Is(err, emulator.ErrNotBuilt) {
		t.Fatal(err) // $FERRY_WEED names no file
	}
	if err != nil {
		t.Skipf("needs SeaweedFS, which is not built here (%v); `go run ./tools/emulators -weed` builds it once, in about 8 minutes", err)
	}
	origin := newStore(t, "s3")
	objs := dataset(t, origin, "train", 3, 12<<20)
	for name, data := range dataset(t, origin, "train/small", 8, 100<<10) {
		objs[name] = data
	}
	var total int64
	for _, d := range objs {
		total += int64(len(d))
	}

	tier, err := emulator.StartSeaweed(t.Context(), weed, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tier.Stop() })
	bucketName := origin.url[len("s3://"):]
	wait := 60 * time.Second // the setting docs/scale-out.md gives: wait for the fill, never read around it
	require.NoError(t, tier.MountRemote(t.Context(), emulator.RemoteMount{Bucket: bucketName,
		Endpoint: "http://" + s3Proxy.Addr, Region: s3Emu.Region, AccessKey: s3Emu.AccessKey, SecretKey: s3Emu.SecretKey, CacheWait: &wait}))
	viaTier := &store{kind: "s3", url: origin.url,
		args: []string{"--endpoint", tier.Endpoint, "--s3-path-style", "--anonymous", "--region", s3Emu.Region}}

	before := origin.bytesServed()
	node1 := mount(t, viaTier, "--cache-dir", t.TempDir())
	readAll(t, node1, objs)
	filled := origin.bytesServed() - before
	t.Logf("node 1: %d bytes from the origin for %d bytes of data", filled, total)
	require.GreaterOrEqual(t, filled, total, "node 1 read through the tier, which must have fetched the data from the origin")
	require.LessOrEqual(t, filled, total+total/10, "the tier fetched the data once, within 10%")

	dropCaches(t)
	before = origin.bytesServed()
	node2 := mount(t, viaTier, "--cache-dir", t.TempDir())
	readAll(t, node2, objs)
	require.Zero(t, origin.bytesServed()-before, "node 2 read everything from the tier")
}
