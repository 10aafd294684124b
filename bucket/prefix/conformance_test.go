package prefix

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
	"ferry/bucket/mem"
)

// writer stages objects under the prefix, for the conformance suite.
type writer struct {
	w bucket.Writer
	p string
}

func (w *writer) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	obj, err := w.w.Put(ctx, &bucket.PutRequest{Name: w.p + req.Name, Data: req.Data})
	if err != nil {
		return nil, err
	}
	out := *obj
	out.Name = obj.Name[len(w.p):]
	return &out, nil
}

func (w *writer) Delete(ctx context.Context, name string) error {
	return w.w.Delete(ctx, w.p+name)
}

// A prefixed view of a bucket that also holds objects next to, above and
// around the prefix must behave exactly like an empty bucket of its own.
func TestConformanceOverMem(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		if strings.HasSuffix(t.Name(), "/LongNames") {
			t.Skip("the prefix counts against the store's name length limit, so names at the limit cannot exist under it")
		}
		m := mem.New("b")
		for _, name := range []string{"train/", "train", "trainer", "trai", "other/x", "a"} {
			_, err := m.Put(context.Background(), &bucket.PutRequest{Name: name, Data: []byte("outside")})
			require.NoError(t, err)
		}
		b, err := New(m, "train")
		require.NoError(t, err)
		return b, &writer{w: m, p: "train/"}
	})
}
