package fs

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/fuseutil"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// opKind indexes the FUSE ops fs answers, for metrics.
type opKind int

const (
	opStatFS opKind = iota
	opLookUp
	opGetAttr
	opSetAttr
	opForget
	opBatchForget
	opMkDir
	opMkNode
	opCreate
	opLink
	opSymlink
	opRename
	opRmDir
	opUnlink
	opOpenDir
	opReadDir
	opReadDirPlus
	opReleaseDir
	opOpen
	opRead
	opWrite
	opFsync
	opFlush
	opRelease
	opReadlink
	opRemoveXattr
	opGetXattr
	opListXattr
	opSetXattr
	opFallocate
	opSyncFS
	numOps
)

// opNames are the op label values: the kernel's names for the ops, in
// lower case, so that they match FUSE debug logs.
var opNames = [numOps]string{
	opStatFS: "statfs", opLookUp: "lookup", opGetAttr: "getattr", opSetAttr: "setattr",
	opForget: "forget", opBatchForget: "batch_forget", opMkDir: "mkdir", opMkNode: "mknod",
	opCreate: "create", opLink: "link", opSymlink: "symlink", opRename: "rename",
	opRmDir: "rmdir", opUnlink: "unlink", opOpenDir: "opendir", opReadDir: "readdir",
	opReadDirPlus: "readdirplus", opReleaseDir: "releasedir", opOpen: "open", opRead: "read",
	opWrite: "write", opFsync: "fsync", opFlush: "flush", opRelease: "release",
	opReadlink: "readlink", opRemoveXattr: "removexattr", opGetXattr: "getxattr",
	opListXattr: "listxattr", opSetXattr: "setxattr", opFallocate: "fallocate", opSyncFS: "syncfs",
}

// readPathOps get their series at registration, at zero, so that rate()
// works from the first scrape; the others (mostly EROFS answers) appear on
// first use.
var readPathOps = []opKind{
	opStatFS, opLookUp, opGetAttr, opForget, opBatchForget, opOpenDir, opReadDir,
	opReadDirPlus, opReleaseDir, opOpen, opRead, opFlush, opRelease, opGetXattr,
}

// opMetrics are the ferry_fuse_* metrics. Each op's children are resolved
// once and kept, so that counting an op takes two atomic adds and a
// histogram observation: no label lookup, no allocation.
type opMetrics struct {
	// Dependencies
	ops      *prometheus.CounterVec   // {op}
	duration *prometheus.HistogramVec // {op}
	errs     *prometheus.CounterVec   // {op, errno}

	// Mutable state: children resolved on first use.
	perOp [numOps]atomic.Pointer[opChildren]
	mu    sync.Mutex // serialises resolving children (not their use)
}

type opChildren struct {
	count    prometheus.Counter
	duration prometheus.Observer
	// errs by errno, resolved on an op's first error with that errno.
	errs sync.Map // syscall.Errno -> prometheus.Counter
}

func newOpMetrics(reg prometheus.Registerer) (*opMetrics, error) {
	m := &opMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fuse_ops_total",
			Help: "FUSE operations answered, by op (lookup, getattr, open, read, readdirplus, ...).",
		}, []string{"op"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_fuse_op_duration_seconds",
			Help: "Time to answer a FUSE operation, by op; reads include any store fetch they waited for.",
			// 10us (a cached getattr) .. 2.6s (a read that waited on a slow store).
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fuse_errors_total",
			Help: "FUSE operations answered with an error, by op and errno (ENOENT from lookup is a normal 'no such file').",
		}, []string{"op", "errno"}),
	}
	for i, c := range []prometheus.Collector{m.ops, m.duration, m.errs} {
		if err := reg.Register(c); err != nil {
			for _, r := range []prometheus.Collector{m.ops, m.duration, m.errs}[:i] {
				reg.Unregister(r)
			}
			return nil, err
		}
	}
	for _, op := range readPathOps {
		m.children(op)
	}
	return m, nil
}

// children returns op's resolved children, resolving them the first time.
func (m *opMetrics) children(op opKind) *opChildren {
	if c := m.perOp[op].Load(); c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.perOp[op].Load(); c != nil {
		return c
	}
	c := &opChildren{
		count:    m.ops.WithLabelValues(opNames[op]),
		duration: m.duration.WithLabelValues(opNames[op]),
	}
	m.perOp[op].Store(c)
	return c
}

// done records one op that started at start and returns err unchanged.
func (m *opMetrics) done(op opKind, start time.Time, err error) error {
	c := m.children(op)
	c.count.Inc()
	c.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		m.countError(op, c, err)
	}
	return err
}

func (m *opMetrics) countError(op opKind, c *opChildren, err error) {
	// fs answers with bare errnos; anything else reaches the kernel as EIO.
	en, ok := err.(syscall.Errno)
	if !ok {
		en = syscall.EIO
	}
	if v, ok := c.errs.Load(en); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	name := unix.ErrnoName(en)
	if name == "" {
		name = "errno_" + strconv.Itoa(int(en))
	}
	ctr := m.errs.WithLabelValues(opNames[op], name)
	c.errs.Store(en, ctr)
	ctr.Inc()
}

// instrumented counts and times every op of the file system it wraps.
// Arguments are evaluated left to right, so time.Now() runs before the op.
type instrumented struct {
	fuseutil.FileSystem
	m *opMetrics
}

var _ fuseutil.FileSystem = (*instrumented)(nil)

func (f *instrumented) StatFS(ctx context.Context, op *fuseops.StatFSOp) error {
	return f.m.done(opStatFS, time.Now(), f.FileSystem.StatFS(ctx, op))
}
func (f *instrumented) LookUpInode(ctx context.Context, op *fuseops.LookUpInodeOp) error {
	return f.m.done(opLookUp, time.Now(), f.FileSystem.LookUpInode(ctx, op))
}
func (f *instrumented) GetInodeAttributes(ctx context.Context, op *fuseops.GetInodeAttributesOp) error {
	return f.m.done(opGetAttr, time.Now(), f.FileSystem.GetInodeAttributes(ctx, op))
}
func (f *instrumented) SetInodeAttributes(ctx context.Context, op *fuseops.SetInodeAttributesOp) error {
	return f.m.done(opSetAttr, time.Now(), f.FileSystem.SetInodeAttributes(ctx, op))
}
func (f *instrumented) ForgetInode(ctx context.Context, op *fuseops.ForgetInodeOp) error {
	return f.m.done(opForget, time.Now(), f.FileSystem.ForgetInode(ctx, op))
}
func (f *instrumented) BatchForget(ctx context.Context, op *fuseops.BatchForgetOp) error {
	return f.m.done(opBatchForget, time.Now(), f.FileSystem.BatchForget(ctx, op))
}
func (f *instrumented) MkDir(ctx context.Context, op *fuseops.MkDirOp) error {
	return f.m.done(opMkDir, time.Now(), f.FileSystem.MkDir(ctx, op))
}
func (f *instrumented) MkNode(ctx context.Context, op *fuseops.MkNodeOp) error {
	return f.m.done(opMkNode, time.Now(), f.FileSystem.MkNode(ctx, op))
}
func (f *instrumented) CreateFile(ctx context.Context, op *fuseops.CreateFileOp) error {
	return f.m.done(opCreate, time.Now(), f.FileSystem.CreateFile(ctx, op))
}
func (f *instrumented) CreateLink(ctx context.Context, op *fuseops.CreateLinkOp) error {
	return f.m.done(opLink, time.Now(), f.FileSystem.CreateLink(ctx, op))
}
func (f *instrumented) CreateSymlink(ctx context.Context, op *fuseops.CreateSymlinkOp) error {
	return f.m.done(opSymlink, time.Now(), f.FileSystem.CreateSymlink(ctx, op))
}
func (f *instrumented) Rename(ctx context.Context, op *fuseops.RenameOp) error {
	return f.m.done(opRename, time.Now(), f.FileSystem.Rename(ctx, op))
}
func (f *instrumented) RmDir(ctx context.Context, op *fuseops.RmDirOp) error {
	return f.m.done(opRmDir, time.Now(), f.FileSystem.RmDir(ctx, op))
}
func (f *instrumented) Unlink(ctx context.Context, op *fuseops.UnlinkOp) error {
	return f.m.done(opUnlink, time.Now(), f.FileSystem.Unlink(ctx, op))
}
func (f *instrumented) OpenDir(ctx context.Context, op *fuseops.OpenDirOp) error {
	return f.m.done(opOpenDir, time.Now(), f.FileSystem.OpenDir(ctx, op))
}
func (f *instrumented) ReadDir(ctx context.Context, op *fuseops.ReadDirOp) error {
	return f.m.done(opReadDir, time.Now(), f.FileSystem.ReadDir(ctx, op))
}
func (f *instrumented) ReadDirPlus(ctx context.Context, op *fuseops.ReadDirPlusOp) error {
	return f.m.done(opReadDirPlus, time.Now(), f.FileSystem.ReadDirPlus(ctx, op))
}
func (f *instrumented) ReleaseDirHandle(ctx context.Context, op *fuseops.ReleaseDirHandleOp) error {
	return f.m.done(opReleaseDir, time.Now(), f.FileSystem.ReleaseDirHandle(ctx, op))
}
func (f *instrumented) OpenFile(ctx context.Context, op *fuseops.OpenFileOp) error {
	return f.m.done(opOpen, time.Now(), f.FileSystem.OpenFile(ctx, op))
}
func (f *instrumented) ReadFile(ctx context.Context, op *fuseops.ReadFileOp) error {
	return f.m.done(opRead, time.Now(), f.FileSystem.ReadFile(ctx, op))
}
func (f *instrumented) WriteFile(ctx context.Context, op *fuseops.WriteFileOp) error {
	return f.m.done(opWrite, time.Now(), f.FileSystem.WriteFile(ctx, op))
}
func (f *instrumented) SyncFile(ctx context.Context, op *fuseops.SyncFileOp) error {
	return f.m.done(opFsync, time.Now(), f.FileSystem.SyncFile(ctx, op))
}
func (f *instrumented) FlushFile(ctx context.Context, op *fuseops.FlushFileOp) error {
	return f.m.done(opFlush, time.Now(), f.FileSystem.FlushFile(ctx, op))
}
func (f *instrumented) ReleaseFileHandle(ctx context.Context, op *fuseops.ReleaseFileHandleOp) error {
	return f.m.done(opRelease, time.Now(), f.FileSystem.ReleaseFileHandle(ctx, op))
}
func (f *instrumented) ReadSymlink(ctx context.Context, op *fuseops.ReadSymlinkOp) error {
	return f.m.done(opReadlink, time.Now(), f.FileSystem.ReadSymlink(ctx, op))
}
func (f *instrumented) RemoveXattr(ctx context.Context, op *fuseops.RemoveXattrOp) error {
	return f.m.done(opRemoveXattr, time.Now(), f.FileSystem.RemoveXattr(ctx, op))
}
func (f *instrumented) GetXattr(ctx context.Context, op *fuseops.GetXattrOp) error {
	return f.m.done(opGetXattr, time.Now(), f.FileSystem.GetXattr(ctx, op))
}
func (f *instrumented) ListXattr(ctx context.Context, op *fuseops.ListXattrOp) error {
	return f.m.done(opListXattr, time.Now(), f.FileSystem.ListXattr(ctx, op))
}
func (f *instrumented) SetXattr(ctx context.Context, op *fuseops.SetXattrOp) error {
	return f.m.done(opSetXattr, time.Now(), f.FileSystem.SetXattr(ctx, op))
}
func (f *instrumented) Fallocate(ctx context.Context, op *fuseops.FallocateOp) error {
	return f.m.done(opFallocate, time.Now(), f.FileSystem.Fallocate(ctx, op))
}
func (f *instrumented) SyncFS(ctx context.Context, op *fuseops.SyncFSOp) error {
	return f.m.done(opSyncFS, time.Now(), f.FileSystem.SyncFS(ctx, op))
}
