// Package dataset generates the benchmark's training data: seeded,
// incompressible bytes in the shapes training reads (large files streamed
// whole, shard files read as ~0.5 MiB records at random offsets, many small
// files, and the MLPerf Storage sample files), written to a local directory
// and uploaded, byte for byte the same, to a store.
//
// Content is a pure function of (seed, name, offset), so any reader can
// check what it got without keeping a copy.
package dataset

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sync/errgroup"

	"ferry/bucket"
)

// File is one object of the dataset.
type File struct {
	Name string
	Size int64
}

// Group is a set of same-sized files under one directory.
type Group struct {
	Dir   string
	Count int
	Size  int64
}

// Spec describes a dataset.
type Spec struct {
	Seed   uint64
	Groups []Group
}

// Files lists the dataset's files in name order.
func (s Spec) Files() []File {
	var out []File
	for _, g := range s.Groups {
		for i := range g.Count {
			out = append(out, File{Name: fmt.Sprintf("%s/%05d.bin", g.Dir, i), Size: g.Size})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Group returns the files of the group with directory dir.
func (s Spec) Group(dir string) []File {
	var out []File
	for _, f := range s.Files() {
		if filepath.Dir(f.Name) == dir {
			out = append(out, f)
		}
	}
	return out
}

// TotalBytes is the size of the whole dataset.
func (s Spec) TotalBytes() int64 {
	var n int64
	for _, g := range s.Groups {
		n += int64(g.Count) * g.Size
	}
	return n
}

// Reader returns the content of the named file: incompressible, seeded,
// the same every time.
func (s Spec) Reader(name string, size int64) io.Reader {
	h := sha256.Sum256(fmt.Appendf(nil, "%d/%s", s.Seed, name))
	var key [32]byte
	copy(key[:], h[:])
	return io.LimitReader(rand.NewChaCha8(key), size)
}

// Bytes returns the whole content of the named file.
func (s Spec) Bytes(name string, size int64) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(s.Reader(name, size), b)
	return b, err
}

// WriteDir writes every file under dir (the local-disk copy the benchmark
// measures as the physical limit). Existing files of the right size are
// kept, so a rerun does not rewrite gigabytes.
func (s Spec) WriteDir(dir string, progress func(int64)) error {
	for _, f := range s.Files() {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if st, err := os.Stat(p); err == nil && st.Size() == f.Size {
			if progress != nil {
				progress(f.Size)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		out, err := os.Create(tmp)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, s.Reader(f.Name, f.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
		if progress != nil {
			progress(f.Size)
		}
	}
	return nil
}

// Upload puts every file into w under prefix, parallel uploads bounded
// by parallel.
func (s Spec) Upload(ctx context.Context, w bucket.Writer, prefix string, parallel int, progress func(int64)) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for _, f := range s.Files() {
		g.Go(func() error {
			b, err := s.Bytes(f.Name, f.Size)
			if err != nil {
				return err
			}
			if _, err := w.Put(ctx, &bucket.PutRequest{Name: prefix + f.Name, Data: b}); err != nil {
				return fmt.Errorf("uploading %s: %w", f.Name, err)
			}
			if progress != nil {
				progress(f.Size)
			}
			return nil
		})
	}
	return g.Wait()
}

// Verify checks that r holds exactly the content of the named file from
// offset off, as many bytes as p holds (p is scratch space).
func (s Spec) Verify(name string, off int64, got []byte) error {
	want := make([]byte, len(got))
	rd := s.Reader(name, off+int64(len(got)))
	if _, err := io.CopyN(io.Discard, rd, off); err != nil {
		return err
	}
	if _, err := io.ReadFull(rd, want); err != nil {
		return err
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: byte %d is %#x, want %#x", name, off+int64(i), got[i], want[i])
		}
	}
	return nil
}
