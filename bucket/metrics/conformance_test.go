package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/mem"
)

// Counting must not change behaviour.
func TestConformanceOverMem(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		m := mem.New("b")
		return New(m, prometheus.NewRegistry()), m
	})
}
