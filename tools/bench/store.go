package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"ferry/bucket"
	"ferry/bucket/emulator"
	"ferry/bucket/gcs"
	"ferry/bucket/s3"
	"ferry/tools/bench/netem"
)

// benchBucket is the bucket the dataset is uploaded to.
const benchBucket = "ferry-bench"

// Remote is the emulated remote store: an emulator running as a child
// process, behind the shaping proxy running in this process. ferry talks
// to the proxy; the dataset is uploaded straight to the emulator (not
// through the emulated link, which would only make setup slow).
type Remote struct {
	Kind  string // "s3" or "gcs"
	Desc  string // what runs, for the report
	Proxy *netem.Server
	// Writer uploads to the emulator directly.
	Writer bucket.Writer
	// Reader reads through the proxy with the same client library ferry
	// uses, for the store-direct row: what this machine and the emulated
	// link deliver without a file system in between.
	Reader bucket.Bucket
	// Source, Args and Env mount the bucket through the proxy.
	Source string
	Args   []string
	Env    []string

	server  *emulator.Server
	closers []func() error
}

// StorePid is the emulator's process id, for its CPU time.
func (r *Remote) StorePid() int { return r.server.Pid() }

// Close stops the proxy and the emulator.
func (r *Remote) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	r.closers = nil
	return errors.Join(errs...)
}

// StartRemote starts the emulator of kind under dir and the proxy with
// link in front of it.
func StartRemote(ctx context.Context, kind, dir string, link netem.Link) (_ *Remote, err error) {
	r := &Remote{Kind: kind}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	switch kind {
	case "s3":
		e, err := emulator.StartS3(ctx, dir)
		if err != nil {
			return nil, err
		}
		r.server = e.Server
		r.closers = append(r.closers, e.Stop)
		p, err := netem.New(e.Endpoint, link, nil)
		if err != nil {
			return nil, err
		}
		if r.Proxy, err = netem.Serve(p, "127.0.0.1:0"); err != nil {
			return nil, err
		}
		r.closers = append(r.closers, r.Proxy.Close)
		if err := e.CreateBucket(ctx, benchBucket); err != nil {
			return nil, err
		}
		w, err := s3.New(ctx, s3.Config{Bucket: benchBucket, Endpoint: e.Endpoint, Region: e.Region, PathStyle: true,
			AccessKey: e.AccessKey, SecretKey: e.SecretKey, MaxConnections: 8})
		if err != nil {
			return nil, err
		}
		r.Writer = retryingWriter{w}
		if r.Reader, err = s3.New(ctx, s3.Config{Bucket: benchBucket, Endpoint: "http://" + r.Proxy.Addr, Region: e.Region, PathStyle: true,
			AccessKey: e.AccessKey, SecretKey: e.SecretKey, MaxConnections: 64}); err != nil {
			return nil, err
		}
		r.Desc = fmt.Sprintf("S3 (versitygw %s, posix backend)", emulator.VersityGW.Version)
		r.Source = "s3://" + benchBucket
		r.Args = []string{"--endpoint", "http://" + r.Proxy.Addr, "--s3-path-style", "--region", e.Region}
		r.Env = []string{"AWS_ACCESS_KEY_ID=" + e.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.SecretKey,
			"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
	case "gcs":
		if err := r.startGCS(ctx, dir, link); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--store %q: want s3 or gcs", kind)
	}
	return r, nil
}

// startGCS starts the proxy first: XML-API reads are only routed when the
// Host header equals fake-gcs-server's -public-host, and clients dial the
// proxy, so the emulator must be told the proxy's address.
func (r *Remote) startGCS(ctx context.Context, dir string, link netem.Link) error {
	port, err := emulator.FreePort()
	if err != nil {
		return err
	}
	direct := "127.0.0.1:" + strconv.Itoa(port)
	p, err := netem.New("http://"+direct, link, nil)
	if err != nil {
		return err
	}
	if r.Proxy, err = netem.Serve(p, "127.0.0.1:0"); err != nil {
		return err
	}
	r.closers = append(r.closers, r.Proxy.Close)
	e, err := emulator.StartGCSWith(ctx, emulator.GCSOptions{Dir: dir, Port: port, PublicHost: r.Proxy.Addr})
	if err != nil {
		return err
	}
	r.server = e.Server
	r.closers = append(r.closers, e.Stop)
	if err := e.CreateBucket(ctx, benchBucket); err != nil {
		return err
	}
	w, err := gcs.New(ctx, gcs.Config{Bucket: benchBucket, Endpoint: e.Endpoint, Anonymous: true, MaxConnections: 8})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, w.Close)
	r.Writer = retryingWriter{w}
	rd, err := gcs.New(ctx, gcs.Config{Bucket: benchBucket, Endpoint: "http://" + r.Proxy.Addr, Anonymous: true, MaxConnections: 64})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, rd.Close)
	r.Reader = rd
	r.Desc = fmt.Sprintf("GCS (fake-gcs-server %s, filesystem backend)", emulator.FakeGCS.Version)
	r.Source = "gs://" + benchBucket
	r.Args = []string{"--endpoint", "http://" + r.Proxy.Addr, "--anonymous"}
	return nil
}

// retryingWriter retries a failed upload a few times: a loaded machine
// can make an emulator miss the client's header timeout on a 256 MiB
// object, and setup should not fail a benchmark for it.
type retryingWriter struct{ bucket.Writer }

func (w retryingWriter) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	var err error
	for attempt := range 4 {
		var obj *bucket.Object
		if obj, err = w.Writer.Put(ctx, req); err == nil {
			return obj, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * time.Second):
		}
	}
	return nil, err
}
