package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// ImageNet-1k's train split, the shape `bench scale` generates.
const (
	imagenetFiles = 1_281_167
	imagenetDirs  = 1000
	// imagenetMean is the mean JPEG size of the train split, about 110 KB.
	imagenetMean = 110_000
	// imagenetSigma is the spread of ln(size): most images lie between
	// a third and three times the median.
	imagenetSigma = 0.5
	// Bounds of a drawn size, so one unlucky draw stays an image.
	imagenetMin = 4 << 10
	imagenetMax = 4 << 20
)

// Tree is a generated dataset: Files files spread round robin over Dirs
// directories under Root, each file's size and bytes a pure function of
// (Seed, index). The first N files of a larger tree with the same Seed,
// Dirs and sizing are the tree of N files, so curves over N compare like
// with like.
type Tree struct {
	Root  string `json:"root"` // top directory name, e.g. "train"
	Files int    `json:"files"`
	Dirs  int    `json:"dirs"`
	// Tiny, when positive, is every file's size (a metadata-only run);
	// zero draws ImageNet-like sizes.
	Tiny int64  `json:"tiny"`
	Seed uint64 `json:"seed"`
}

// ID names the tree's directory under --data-dir.
func (t Tree) ID() string {
	sizes := "imagenet"
	if t.Tiny > 0 {
		sizes = fmt.Sprintf("tiny%d", t.Tiny)
	}
	return fmt.Sprintf("%s-%d-d%d-%s-s%d", t.Root, t.Files, t.Dirs, sizes, t.Seed)
}

// Dir is the directory of file i, relative to the tree's parent.
func (t Tree) Dir(i int) string {
	if t.Dirs <= 1 {
		return t.Root
	}
	return fmt.Sprintf("%s/n%05d", t.Root, i%t.Dirs)
}

// Name is file i's path, relative to the tree's parent.
func (t Tree) Name(i int) string {
	if t.Dirs <= 1 {
		return fmt.Sprintf("%s/%08d.JPEG", t.Root, i)
	}
	return fmt.Sprintf("%s/n%05d_%d.JPEG", t.Dir(i), i%t.Dirs, i/t.Dirs)
}

// Size is file i's size: Tiny, or drawn from a log-normal whose mean is
// ImageNet's.
func (t Tree) Size(i int) int64 {
	if t.Tiny > 0 {
		return t.Tiny
	}
	r := rand.New(rand.NewPCG(t.Seed, uint64(i)))
	mu := math.Log(imagenetMean) - imagenetSigma*imagenetSigma/2
	s := int64(math.Exp(mu + imagenetSigma*r.NormFloat64()))
	return min(max(s, imagenetMin), imagenetMax)
}

// Names lists every file, index order.
func (t Tree) Names() []string {
	out := make([]string, t.Files)
	for i := range out {
		out[i] = t.Name(i)
	}
	return out
}

// TotalBytes is the sum of the file sizes.
func (t Tree) TotalBytes() int64 {
	var n int64
	for i := range t.Files {
		n += t.Size(i)
	}
	return n
}

// content returns file i's bytes: incompressible and seeded.
func (t Tree) content(i int, buf []byte) []byte {
	var key [32]byte
	key[0] = 's'
	for b := range 8 {
		key[1+b] = byte(t.Seed >> (8 * b))
		key[9+b] = byte(uint64(i) >> (8 * b))
	}
	b := buf[:t.Size(i)]
	_, _ = io.ReadFull(rand.NewChaCha8(key), b)
	return b
}

// treeManifest is written beside a finished tree; a later run whose Tree
// equals it reuses the tree instead of writing it again.
type treeManifest struct {
	Tree  Tree  `json:"tree"`
	Bytes int64 `json:"bytes"`
}

const manifestName = "manifest.json"

// Generate writes the tree under dir (dir/Root/...) with parallel
// writers, unless dir's manifest says it is this tree already. It
// returns whether it wrote anything.
func (t Tree) Generate(ctx context.Context, dir string, parallel int, progress func(int)) (wrote bool, err error) {
	if t.Files <= 0 || t.Dirs <= 0 {
		return false, fmt.Errorf("tree %s: want positive files and dirs", t.ID())
	}
	mpath := filepath.Join(dir, manifestName)
	if b, err := os.ReadFile(mpath); err == nil {
		var m treeManifest
		if json.Unmarshal(b, &m) == nil && m.Tree == t {
			return false, nil
		}
	}
	// A tree without its manifest is unfinished or another tree: start
	// again, so no stale file is measured.
	if err := os.RemoveAll(dir); err != nil {
		return false, err
	}
	for d := range min(t.Dirs, t.Files) {
		if err := os.MkdirAll(filepath.Join(dir, t.Dir(d)), 0o755); err != nil {
			return true, err
		}
	}
	var next, done atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range max(parallel, 1) {
		g.Go(func() error {
			buf := make([]byte, imagenetMax)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= t.Files {
					return nil
				}
				if err := os.WriteFile(filepath.Join(dir, t.Name(i)), t.content(i, buf), 0o644); err != nil {
					return err
				}
				if n := done.Add(1); progress != nil && n%10000 == 0 {
					progress(int(n))
				}
			}
			return ctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return true, err
	}
	b, err := json.Marshal(treeManifest{Tree: t, Bytes: t.TotalBytes()})
	if err != nil {
		return true, err
	}
	return true, errors.Join(os.WriteFile(mpath+".tmp", b, 0o644), os.Rename(mpath+".tmp", mpath))
}
