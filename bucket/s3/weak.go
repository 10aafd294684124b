package s3

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Weak versions. A store that gives an object no ETag (versitygw for a
// file written into its directory by hand, some gateways in front of a
// NAS) leaves nothing to pin a read to: readahead's parts, the disk
// cache's key, the kernel's page cache and passthrough would all take a
// rewrite of the same size for the same object, and could mix two
// versions' bytes. Such an object's Version is its modification time, to
// the second (what HTTP's Last-Modified carries), and its size; a read
// pinned to it compares the answer's Last-Modified and size with it, and
// fails with ErrPrecondition if they differ. (No If-Unmodified-Since: a
// store that gives no ETag may compare times with more precision than it
// reports, as versitygw does, and refuse the object's own time.) What it
// cannot see: a rewrite of the same size within the same second.

// weakPrefix starts a weak version; an ETag cannot hold a space.
const weakPrefix = "weak "

// weakVersion is the version of an object without an ETag.
func weakVersion(modified time.Time, size uint64) string {
	return weakPrefix + strconv.FormatInt(modified.Unix(), 10) + " " + strconv.FormatUint(size, 10)
}

// ifMatch is the If-Match precondition of a request pinned to version:
// its ETag, quoted as HTTP wants; none for a weak version, whose answer
// is compared instead.
func ifMatch(version string) *string {
	if strings.HasPrefix(version, weakPrefix) {
		return nil
	}
	return aws.String(`"` + version + `"`)
}

// versionOf is an object's Version: its ETag, quotes stripped (versions
// compare equal whether a store quotes or not), or without one a weak
// version (the first such object is logged, once).
func (b *Bucket) versionOf(name string, etag *string, modified *time.Time, size uint64) string {
	if v := strings.Trim(aws.ToString(etag), `"`); v != "" {
		return v
	}
	if !b.weakSeen.Swap(true) {
		b.log.Warn(fmt.Sprintf("%s gives objects without an ETag; ferry tells their versions apart by modification time, "+
			"to the second, and size: a rewrite of the same size within the same second goes unseen (logged once)", b.name),
			"example", name)
	}
	return weakVersion(aws.ToTime(modified), size)
}
