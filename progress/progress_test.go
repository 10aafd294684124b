package progress

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoBarOffATerminal: a file or a buffer gets no bar unless asked, and
// a nil bar takes every call.
func TestNoBarOffATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer f.Close()
	var buf bytes.Buffer
	for _, w := range []io.Writer{f, &buf} {
		b := New(Config{Writer: w, Label: "x", Total: 100})
		assert.Nil(t, b, "%T", w)
		b.Add(10)
		b.SetTotal(200)
		b.SetNote("1/2 files")
		b.Clear()
		b.Finish()
	}
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Zero(t, st.Size())
	assert.Zero(t, buf.Len())
	assert.False(t, IsTerminal(f))
}

// TestRateOnlyOnceItMeansSomething: the text beside the bar gives the
// bytes from the start, and the average rate only from MinRateTime on.
func TestRateOnlyOnceItMeansSomething(t *testing.T) {
	var buf bytes.Buffer
	b := New(Config{Writer: &buf, Label: "seq-4 epoch 1", Total: 192 << 20, Force: true, Clear: true})
	require.NotNil(t, b)
	b.Add(2 << 20) // a burst at once: the library would call it TiB/s
	assert.Equal(t, "seq-4 epoch 1: 2.0 MiB of 192 MiB", b.text(b.start.Add(100*time.Millisecond)))
	assert.Equal(t, "seq-4 epoch 1: 2.0 MiB of 192 MiB", b.text(b.start.Add(MinRateTime-time.Millisecond)))
	b.Add(98 << 20)
	assert.Equal(t, "seq-4 epoch 1: 100 MiB of 192 MiB, 25 MiB/s", b.text(b.start.Add(4*time.Second)))
	b.SetNote("3/8 files")
	assert.Equal(t, "seq-4 epoch 1: 3/8 files, 100 MiB of 192 MiB", b.text(b.start.Add(time.Second)))
	b.Finish()
	assert.NotContains(t, buf.String(), "TiB/s")
	assert.NotContains(t, buf.String(), "GiB/s", "no rate from the first samples: %q", buf.String())
}

// TestUnknownTotal: a bar whose total comes later (warm scans as it
// reads) says only what is done until then.
func TestUnknownTotal(t *testing.T) {
	var buf bytes.Buffer
	b := New(Config{Writer: &buf, Label: "warming", Force: true})
	b.Add(5 << 20)
	assert.Equal(t, "warming: 5.0 MiB", b.text(b.start))
	b.SetTotal(10 << 20)
	assert.Equal(t, "warming: 5.0 MiB of 10 MiB", b.text(b.start))
	b.Finish()
	assert.True(t, strings.HasSuffix(buf.String(), "\n"), "a bar that stays ends its line")
}
