package fs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// register registers the file system's metrics (and opMetrics', the
// counts and times of FUSE ops).
func (fs *fileSystem) register(reg prometheus.Registerer) error {
	inodes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_fs_inodes",
		Help: "Inodes the kernel currently holds references to.",
	}, func() float64 { return float64(fs.inodeCount()) })
	forgotten := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_names_forgotten_total",
		Help: "Names the kernel was asked to forget to keep the inodes within their half of --metadata-limit.",
	}, func() float64 {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return float64(fs.trim.trimmed)
	})
	ahead := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_files_read_ahead_total",
		Help: "Files opened ahead because the files before them in their directory were read in listing order.",
	}, func() float64 { return float64(fs.readers.Stats().Started) })
	aheadTaken := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_files_read_ahead_taken_total",
		Help: "Files opened ahead whose handle an open then took over.",
	}, func() float64 { return float64(fs.readers.Stats().Taken) })
	passthrough := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_passthrough_opens_total",
		Help: "Opens of files held whole in the disk cache that the kernel reads from the cache file itself (FUSE passthrough): their reads never reach ferry.",
	}, func() float64 { return float64(fs.pt.opens.Load()) })
	passthroughBytes := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_passthrough_opened_bytes_total",
		Help: "Sizes of the files opened for passthrough: at most what the kernel read from cache files without ferry (ferry cannot see those reads), counted as cache hits by ferry stats.",
	}, func() float64 { return float64(fs.pt.openedBytes.Load()) })
	readied := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_passthrough_readied_total",
		Help: "Files made ready for passthrough by reading, after a handle was released, the few bytes missing from the disk cache or not yet checked by reads (at most 1 MiB and an eighth of the file).",
	}, func() float64 { return float64(fs.ready.files.Load()) })
	readiedBytes := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_passthrough_readied_bytes_total",
		Help: "Bytes read to ready files for passthrough, also by reads that did not make a file ready.",
	}, func() float64 { return float64(fs.ready.bytes.Load()) })
	spliced := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_spliced_reads_total",
		Help: "Reads answered from the disk cache without ferry reading the bytes: spliced from the cache file to the kernel (blocks checked earlier in the mount, in a file unchanged since).",
	}, func() float64 {
		if c := fs.conn.fc.Load(); c != nil {
			return float64(c.Spliced())
		}
		return 0
	})
	direct := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_direct_opens_total",
		Help: "Opens of files whose last handle read them at random, with the kernel's FUSE page cache bypassed (direct I/O): each read comes to ferry as the application made it.",
	}, func() float64 { return float64(fs.sp.directOpens.Load()) })
	interrupts := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_interrupts_total",
		Help: "FUSE interrupts of requests in flight: the kernel sends one for any signal to a caller waiting for ferry.",
	}, func() float64 { return float64(fs.intr.count.Load()) })
	interruptsCancelled := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ferry_fs_interrupts_cancelled_total",
		Help: "Requests cancelled because their caller was quitting (killed, or asked to stop with SIGINT or SIGTERM); an interrupt from another signal the caller handles lets the request finish.",
	}, func() float64 { return float64(fs.intr.cancelled.Load()) })
	for _, c := range []prometheus.Collector{inodes, forgotten, ahead, aheadTaken, passthrough, passthroughBytes, readied, readiedBytes, spliced, direct, interrupts, interruptsCancelled} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	ops, err := newOpMetrics(reg)
	if err != nil {
		return err
	}
	fs.ops = ops
	return nil
}
