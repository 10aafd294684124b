package gcs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"ferry/bucket"
)

// listToken is the state a continuation token carries beyond the server's
// page token. On GCS, After is set only while a server page is being
// handed out in slices and LastPrefix never drops anything.
type listToken struct {
	// Server is the GCS page token of the server page to (re)fetch.
	Server string `json:"s,omitempty"`
	// After: entries (objects and prefixes) of that page up to and
	// including this name were already returned.
	After string `json:"a,omitempty"`
	// LastPrefix is the greatest prefix returned so far; prefixes up to
	// it are repeats (fake-gcs-server returns every prefix at or after
	// the page token on every page).
	LastPrefix string `json:"p,omitempty"`
}

// tokenMark starts tokens that carry a listToken; anything else is a raw
// GCS page token (those are base64 and never contain ':').
const tokenMark = "ferry1:"

func decodeToken(s string) (listToken, error) {
	raw, ok := strings.CutPrefix(s, tokenMark)
	if !ok {
		return listToken{Server: s}, nil
	}
	var t listToken
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil {
		return listToken{}, fmt.Errorf("gcs: list: malformed continuation token: %w", bucket.ErrInvalid)
	}
	return t, nil
}

func (t listToken) encode() string {
	if t.After == "" && t.LastPrefix == "" {
		return t.Server
	}
	b, _ := json.Marshal(t) // cannot fail: three strings
	return tokenMark + base64.RawURLEncoding.EncodeToString(b)
}

// List fetches one server page (maxResults = MaxResults) and returns at
// most MaxResults of its entries; see the package comment for why a page
// may be handed out in slices.
func (b *Bucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	if req.MaxResults < 0 {
		return nil, fmt.Errorf("gcs: list: MaxResults %d: %w", req.MaxResults, bucket.ErrInvalid)
	}
	tok, err := decodeToken(req.ContinuationToken)
	if err != nil {
		return nil, err
	}
	q := &storage.Query{Prefix: req.Prefix, Delimiter: req.Delimiter}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Generation", "Updated", "CRC32C"}); err != nil {
		return nil, fmt.Errorf("gcs: list: %w", err)
	}
	lctx, stalled := watchStalls(ctx)
	it := b.bkt.Objects(lctx, q)
	it.PageInfo().Token = tok.Server
	it.PageInfo().MaxSize = req.MaxResults // 0: the server's default

	// Next fetches one page (more only if a page comes back empty with a
	// token); then drain exactly what that fetch buffered.
	var page []*storage.ObjectAttrs
	a, err := it.Next()
	if err != nil && !errors.Is(err, iterator.Done) {
		if stalled.Load() && ctx.Err() == nil {
			return nil, stallError("list", req.Prefix, b.readTimeout)
		}
		return nil, mapError(ctx, "list", req.Prefix, err)
	}
	if err == nil {
		page = append(page, a)
		for n := it.PageInfo().Remaining(); n > 0; n-- {
			a, err := it.Next()
			if err != nil {
				return nil, mapError(ctx, "list", req.Prefix, err)
			}
			page = append(page, a)
		}
	}
	next := it.PageInfo().Token

	type entry struct {
		name  string
		attrs *storage.ObjectAttrs // nil for a prefix
	}
	entries := make([]entry, 0, len(page))
	for _, a := range page {
		switch {
		case a.Prefix != "":
			if tok.LastPrefix != "" && a.Prefix <= tok.LastPrefix {
				continue // a repeat from an earlier page
			}
			entries = append(entries, entry{name: a.Prefix})
		default:
			entries = append(entries, entry{name: a.Name, attrs: a})
		}
	}
	slices.SortFunc(entries, func(x, y entry) int { return strings.Compare(x.name, y.name) })
	if tok.After != "" {
		i, _ := slices.BinarySearchFunc(entries, tok.After, func(e entry, s string) int { return strings.Compare(e.name, s) })
		for i < len(entries) && entries[i].name <= tok.After {
			i++
		}
		entries = entries[i:]
	}
	rest := 0
	if req.MaxResults > 0 && len(entries) > req.MaxResults {
		rest = len(entries) - req.MaxResults
		entries = entries[:req.MaxResults]
	}

	out := &bucket.Listing{}
	lastPrefix := tok.LastPrefix
	for _, e := range entries {
		if e.attrs == nil {
			out.Prefixes = append(out.Prefixes, e.name)
			lastPrefix = max(lastPrefix, e.name)
			continue
		}
		out.Objects = append(out.Objects, objectFromAttrs(e.attrs))
	}
	switch {
	case rest > 0:
		// More of this server page to hand out: fetch it again next time.
		out.ContinuationToken = listToken{Server: tok.Server, After: entries[len(entries)-1].name, LastPrefix: lastPrefix}.encode()
	case next != "":
		out.ContinuationToken = listToken{Server: next, LastPrefix: lastPrefix}.encode()
	}
	return out, nil
}
