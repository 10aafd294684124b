// Package progress draws the progress bars of `ferry warm` and
// tools/bench with schollz/progressbar, by two rules: a bar is drawn only
// on a terminal (a file or a pipe gets no bar, no "\r" and no escape
// codes), and a rate only once it means something. The library's own
// rate, from its first samples, read "5.7 TiB/s" at 1%; this one is the
// average since the bar started, shown from MinRateTime on.
//
// It must never write anywhere but the writer it was given, and never
// hold up the reader that reports progress for longer than a redraw.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// MinRateTime is how long a bar runs before it shows a rate: long enough
// that the first round trips and a burst of cached bytes no longer make
// the average.
const MinRateTime = 2 * time.Second

// describeEvery bounds how often the text beside the bar is redone.
const describeEvery = 250 * time.Millisecond

// Config says where a bar goes and what it counts.
type Config struct {
	Writer io.Writer
	// Label says what is in progress: "warming", "seq-4 epoch 1".
	Label string
	// Total is the bytes to come, if known (0: not yet; see SetTotal).
	Total int64
	// Force draws on a Writer that is not a terminal too (the user asked
	// for it: ferry warm --progress always).
	Force bool
	// Clear removes the bar when it finishes, for output that follows on
	// the same line; otherwise the finished bar stays, on a line of its
	// own.
	Clear bool
}

// Bar is one progress bar of bytes. Its methods are safe for concurrent
// use, and do nothing on a nil *Bar, which is what New returns when
// there is to be no bar.
type Bar struct {
	// Constant data
	bar   *progressbar.ProgressBar
	w     io.Writer
	label string
	clear bool
	start time.Time

	mu          sync.Mutex
	done, total int64     // GUARDED_BY(mu)
	note        string    // GUARDED_BY(mu)
	described   time.Time // GUARDED_BY(mu) when the text was last redone
}

// New starts a bar, or returns nil when cfg.Writer is not a terminal and
// cfg.Force is not set.
func New(cfg Config) *Bar {
	if !cfg.Force && !IsTerminal(cfg.Writer) {
		return nil
	}
	total := cfg.Total
	if total <= 0 {
		total = -1 // the library's "not known": a spinner
	}
	b := &Bar{w: cfg.Writer, label: cfg.Label, clear: cfg.Clear, start: time.Now(), total: cfg.Total}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(cfg.Writer),
		progressbar.OptionSetDescription(b.text(b.start)),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200 * time.Millisecond),
		progressbar.OptionSetPredictTime(false),
	}
	if cfg.Clear {
		opts = append(opts, progressbar.OptionClearOnFinish())
	}
	b.bar = progressbar.NewOptions64(total, opts...)
	return b
}

// Add counts n more bytes done.
func (b *Bar) Add(n int64) {
	if b == nil || n <= 0 {
		return
	}
	now := time.Now()
	b.mu.Lock()
	b.done += n
	var text string
	if now.Sub(b.described) >= describeEvery {
		b.described = now
		text = b.textLocked(now)
	}
	b.mu.Unlock()
	if text != "" {
		b.bar.Describe(text)
	}
	_ = b.bar.Add64(n)
}

// SetTotal sets the bytes to come, once known or grown.
func (b *Bar) SetTotal(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.total = n
	b.mu.Unlock()
	b.bar.ChangeMax64(n)
}

// SetNote sets what the bar says before the bytes, e.g. "12/40 files".
func (b *Bar) SetNote(note string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.note = note
	b.described = time.Now()
	text := b.textLocked(b.described)
	b.mu.Unlock()
	b.bar.Describe(text)
}

// Clear removes the bar from its line, so that a message can be printed
// there; the next Add draws it again.
func (b *Bar) Clear() {
	if b == nil {
		return
	}
	_ = b.bar.Clear()
}

// Finish ends the bar: removed (Config.Clear) or left complete on its
// line.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	text := b.textLocked(time.Now())
	b.mu.Unlock()
	b.bar.Describe(text)
	_ = b.bar.Finish()
	if !b.clear {
		fmt.Fprintln(b.w)
	}
}

// text is what the bar says beside it at now.
func (b *Bar) text(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.textLocked(now)
}

// textLocked is "label: note, 88 MiB of 192 MiB, 212 MiB/s", the rate
// only from MinRateTime on.
//
// LOCKS_REQUIRED(b.mu)
func (b *Bar) textLocked(now time.Time) string {
	s := b.label + ":"
	if b.note != "" {
		s += " " + b.note + ","
	}
	s += " " + humanize.IBytes(uint64(b.done))
	if b.total > 0 {
		s += " of " + humanize.IBytes(uint64(b.total))
	}
	if el := now.Sub(b.start); el >= MinRateTime {
		s += ", " + humanize.IBytes(uint64(float64(b.done)/el.Seconds())) + "/s"
	}
	return s
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
