package filecache

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	crashEnvDir = "FERRY_FILECACHE_CRASH_DIR"
	crashObjs   = 64
	crashBlocks = 16
	// The child's cap is half its working set, so it keeps evicting and
	// re-creating entries: the kill lands among creates, deletes and
	// commits, not only writes.
	crashCap = crashObjs * crashBlocks * testBS / 2
)

func crashObj(i int) Key { return obj(fmt.Sprintf("crash/%d", i), crashBlocks*testBS-33) }

// TestCrashChild is the child half of TestCrashKill9: it fills a cache
// until it is killed. It does nothing unless started by the parent.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		t.Skip("only runs as TestCrashKill9's child")
	}
	s, err := open(Config{Dir: dir, BlockSize: testBS, MaxSize: crashCap, BucketID: "mem://test"}, hooks{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for round := 0; ; round++ {
		for i := 0; i < crashObjs; i++ {
			o := crashObj(i)
			// Two blocks at a time, in an order that differs per round.
			first := int64((i*7 + round*3) % (crashBlocks - 1))
			s.WriteBlocks(o, first, blocksData(o, first, 2, testBS))
		}
		if round == 2 {
			if err := s.flush(); err != nil {
				fmt.Println("flush:", err)
				os.Exit(2)
			}
			fmt.Println("flushed", strconv.Itoa(round))
		}
	}
}

// TestCrashKill9 kills a process mid-fill with SIGKILL, reopens its cache
// and checks that every block the cache still serves is byte-correct.
func TestCrashKill9(t *testing.T) {
	if os.Getenv(crashEnvDir) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	for attempt := 0; attempt < 3; attempt++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnvDir+"="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err, "child output: %q", line)
		require.Contains(t, line, "flushed")
		// Let it keep writing (and committing) for a moment, then kill it
		// without warning, at a different point each attempt.
		time.Sleep(time.Duration(300+700*attempt) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		cmd.Wait()

		s := openT(t, Config{Dir: dir, MaxSize: 1 << 30}, hooks{})
		hits := 0
		for i := 0; i < crashObjs; i++ {
			for b := int64(0); b < crashBlocks; b++ {
				if readOK(t, s, crashObj(i), b) {
					hits++
				}
			}
		}
		t.Logf("attempt %d: %d blocks survived, stats %+v", attempt, hits, s.Stats())
		assert.Positive(t, hits, "blocks committed before the kill survive")
		assert.Zero(t, s.Stats().CorruptBlocks, "kill -9 loses no written data")
		s.checkInvariants(t)
		require.NoError(t, s.Close())
	}
}
