// Package dv implements Delta Lake deletion vectors: the descriptor stored in
// add/remove actions, Z85 encoding, the RoaringBitmapArray serialization and
// the deletion-vector file format (delta.md §1.7, PROTOCOL.md "Deletion
// Vector Format").
package dv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/google/uuid"
)

// Storage types.
const (
	StorageUUID     = "u" // file <table>/<prefix>/deletion_vector_<uuid>.bin
	StorageInline   = "i" // Z85 bitmap in pathOrInlineDv
	StorageAbsolute = "p" // absolute path in pathOrInlineDv
)

// Descriptor is the deletionVector object of add/remove actions.
type Descriptor struct {
	StorageType    string `json:"storageType"`
	PathOrInlineDv string `json:"pathOrInlineDv"`
	Offset         *int32 `json:"offset,omitempty"`
	SizeInBytes    int32  `json:"sizeInBytes"`
	Cardinality    int64  `json:"cardinality"`
	MaxRowIndex    *int64 `json:"maxRowIndex,omitempty"`
}

// UniqueID identifies the DV for (path, DV) reconciliation:
// storageType + pathOrInlineDv, plus "@offset" when an offset is present.
func (d *Descriptor) UniqueID() string {
	if d == nil {
		return ""
	}
	id := d.StorageType + d.PathOrInlineDv
	if d.Offset != nil {
		id += "@" + strconv.FormatInt(int64(*d.Offset), 10)
	}
	return id
}

// OffsetOrZero returns the offset, 0 when absent.
func (d *Descriptor) OffsetOrZero() int64 {
	if d.Offset == nil {
		return 0
	}
	return int64(*d.Offset)
}

// IsInline reports storage type 'i'.
func (d *Descriptor) IsInline() bool { return d.StorageType == StorageInline }

// UUID decodes the UUID of a 'u' descriptor and returns it with the random
// prefix (possibly empty).
func (d *Descriptor) UUID() (prefix string, id uuid.UUID, err error) {
	if d.StorageType != StorageUUID {
		return "", uuid.UUID{}, fmt.Errorf("deletion vector: storage type %q has no UUID", d.StorageType)
	}
	p := d.PathOrInlineDv
	if len(p) < 20 {
		return "", uuid.UUID{}, fmt.Errorf("deletion vector: pathOrInlineDv %q is shorter than a Z85 UUID", p)
	}
	prefix, enc := p[:len(p)-20], p[len(p)-20:]
	b, err := Z85Decode(enc)
	if err != nil {
		return "", uuid.UUID{}, fmt.Errorf("deletion vector: pathOrInlineDv %q: %w", p, err)
	}
	copy(id[:], b)
	return prefix, id, nil
}

// RelativePath returns, for a 'u' DV, the path of its file relative to the
// table root: "<prefix>/deletion_vector_<uuid>.bin" (no prefix directory when
// the prefix is empty).
func (d *Descriptor) RelativePath() (string, error) {
	prefix, id, err := d.UUID()
	if err != nil {
		return "", err
	}
	name := "deletion_vector_" + id.String() + ".bin"
	if prefix != "" {
		return prefix + "/" + name, nil
	}
	return name, nil
}

// AbsolutePath returns the DV file's location: tableRoot joined with
// RelativePath for 'u', pathOrInlineDv unchanged for 'p' (a URI, as Delta
// stores it). Inline DVs have no file and return an error.
func (d *Descriptor) AbsolutePath(tableRoot string) (string, error) {
	switch d.StorageType {
	case StorageUUID:
		rel, err := d.RelativePath()
		if err != nil {
			return "", err
		}
		if tableRoot == "" {
			return rel, nil
		}
		return strings.TrimRight(tableRoot, "/") + "/" + rel, nil
	case StorageAbsolute:
		if d.PathOrInlineDv == "" {
			return "", errors.New("deletion vector: empty absolute path")
		}
		return d.PathOrInlineDv, nil
	case StorageInline:
		return "", errors.New("deletion vector: inline DV has no file")
	}
	return "", fmt.Errorf("deletion vector: unknown storage type %q", d.StorageType)
}

// ---------------------------------------------------------------- bitmap (de)serialization

const (
	magicPortable = 1681511377 // RoaringBitmapArray portable format (current)
	magicNative   = 1681511376 // legacy native format
)

// ErrCorrupt is wrapped by every error about malformed DV data.
var ErrCorrupt = errors.New("corrupt deletion vector")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// SerializeBitmap returns Delta's bitmap data for bm: magic 1681511377
// (little-endian) followed by the 64-bit Roaring portable serialization.
// bm is run-optimized in place first (as Delta does), so the output is
// byte-identical to Spark's for the same set.
func SerializeBitmap(bm *roaring64.Bitmap) ([]byte, error) {
	bm.RunOptimize()
	var buf bytes.Buffer
	buf.Grow(4 + int(bm.GetSerializedSizeInBytes()))
	var m [4]byte
	binary.LittleEndian.PutUint32(m[:], magicPortable)
	buf.Write(m[:])
	if _, err := bm.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// minBucketBytes is the smallest possible serialized (key, 32-bit bitmap) pair:
// 4-byte key + 4-byte cookie + 4-byte container count.
const minBucketBytes = 12

// DeserializeBitmap parses bitmap data (portable or legacy native format).
// It never panics and never allocates much more than len(data) on hostile
// input.
func DeserializeBitmap(data []byte) (bm *roaring64.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, corrupt("bitmap decoding panicked: %v", r)
		}
	}()
	if len(data) < 4 {
		return nil, corrupt("bitmap data of %d bytes is too short", len(data))
	}
	switch m := binary.LittleEndian.Uint32(data); m {
	case magicPortable:
		bm, err = readPortable(data[4:])
	case magicNative:
		bm, err = readNative(data[4:])
	default:
		return nil, corrupt("unknown bitmap magic %d", m)
	}
	if err != nil {
		return nil, err
	}
	if err := bm.Validate(); err != nil {
		return nil, corrupt("invalid bitmap: %v", err)
	}
	if !bm.IsEmpty() && bm.Maximum() >= 1<<63 {
		return nil, corrupt("row index %d has the sign bit set", bm.Maximum())
	}
	return bm, nil
}

func readPortable(b []byte) (*roaring64.Bitmap, error) {
	if len(b) < 8 {
		return nil, corrupt("portable bitmap header truncated")
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8)/minBucketBytes {
		return nil, corrupt("bitmap declares %d buckets in %d bytes", n, len(b))
	}
	// Check the bucket keys are strictly increasing while walking the buckets.
	r := bytes.NewReader(b[8:])
	var prev int64 = -1
	for i := uint64(0); i < n; i++ {
		var kb [4]byte
		if _, err := io.ReadFull(r, kb[:]); err != nil {
			return nil, corrupt("bucket %d key: %v", i, err)
		}
		k := int64(binary.LittleEndian.Uint32(kb[:]))
		if k <= prev {
			return nil, corrupt("bucket keys not strictly increasing (%d after %d)", k, prev)
		}
		prev = k
		if err := skip32(r); err != nil {
			return nil, corrupt("bucket %d: %v", i, err)
		}
	}
	if r.Len() != 0 {
		return nil, corrupt("%d trailing bytes after bitmap", r.Len())
	}
	bm := roaring64.New()
	if _, err := bm.ReadFrom(bytes.NewReader(b)); err != nil {
		return nil, corrupt("%v", err)
	}
	return bm, nil
}

// skip32 advances r past one serialized 32-bit Roaring bitmap.
func skip32(r *bytes.Reader) error {
	// roaring's ReadFrom on an io.Reader consumes exactly the serialized size.
	_, err := newBitmap32().ReadFrom(r)
	return err
}

func readNative(b []byte) (*roaring64.Bitmap, error) {
	if len(b) < 4 {
		return nil, corrupt("native bitmap header truncated")
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4)/8 {
		return nil, corrupt("bitmap declares %d bitmaps in %d bytes", n, len(b))
	}
	// Rewrite as portable: key = index, skipping empty bitmaps.
	var out bytes.Buffer
	out.Write(make([]byte, 8))
	r := bytes.NewReader(b[4:])
	var buckets uint64
	for i := uint32(0); i < n; i++ {
		before := r.Len()
		tmp := newBitmap32()
		if _, err := tmp.ReadFrom(r); err != nil {
			return nil, corrupt("bitmap %d: %v", i, err)
		}
		if tmp.IsEmpty() {
			continue
		}
		used := before - r.Len()
		off := len(b) - 4 - before
		var kb [4]byte
		binary.LittleEndian.PutUint32(kb[:], i)
		out.Write(kb[:])
		out.Write(b[4+off : 4+off+used])
		buckets++
	}
	if r.Len() != 0 {
		return nil, corrupt("%d trailing bytes after bitmap", r.Len())
	}
	ob := out.Bytes()
	binary.LittleEndian.PutUint64(ob, buckets)
	bm := roaring64.New()
	if _, err := bm.ReadFrom(bytes.NewReader(ob)); err != nil {
		return nil, corrupt("%v", err)
	}
	return bm, nil
}

// ---------------------------------------------------------------- DV files

// FileVersion is the first byte of a DV file.
const FileVersion = 1

// MaxSize bounds the declared size of one serialized DV accepted by readers
// (Delta's sizeInBytes is an int32). 1 GiB.
const MaxSize = 1 << 30

// EncodeFile returns a complete one-DV file (version byte, size, data, CRC)
// for bitmap data; the DV sits at offset 1.
func EncodeFile(data []byte) []byte {
	return appendEntry(append(make([]byte, 0, 1+4+len(data)+4), FileVersion), data)
}

// appendEntry appends one DV entry (size, bitmap data, CRC) to a DV file.
func appendEntry(out, data []byte) []byte {
	out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
	out = append(out, data...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(data))
}

// Write serializes bm into a new DV file named with a random UUID (storage
// type 'u', no prefix, offset 1). The caller stores fileBytes at
// desc.AbsolutePath(tableRoot) (never overwriting an existing file) and puts
// desc into the add action. bm is run-optimized in place.
func Write(bm *roaring64.Bitmap) (fileBytes []byte, desc Descriptor, err error) {
	file, descs, err := WriteMany([]*roaring64.Bitmap{bm})
	if err != nil {
		return nil, Descriptor{}, err
	}
	return file, descs[0], nil
}

// MaxFileSize bounds the DV file WriteMany builds: offsets are int32.
const MaxFileSize = math.MaxInt32

// WriteMany serializes bms into one new DV file (storage type 'u', a random
// UUID), each entry at its own offset, as Spark stores the DVs of one task:
// a batch that touches many data files writes one object, not one per file.
// descs[i] describes bms[i]. The bitmaps are run-optimized in place. A file
// that would exceed MaxFileSize is refused: the caller splits bms.
func WriteMany(bms []*roaring64.Bitmap) (fileBytes []byte, descs []Descriptor, err error) {
	id := uuid.New()
	path := Z85Encode(id[:])
	out := []byte{FileVersion}
	descs = make([]Descriptor, len(bms))
	for i, bm := range bms {
		data, err := SerializeBitmap(bm)
		if err != nil {
			return nil, nil, err
		}
		if len(data) > MaxSize {
			return nil, nil, fmt.Errorf("deletion vector of %d bytes is too large", len(data))
		}
		if int64(len(out))+4+int64(len(data))+4 > MaxFileSize {
			return nil, nil, fmt.Errorf("%d deletion vectors do not fit one file of at most %d bytes", len(bms), int64(MaxFileSize))
		}
		off := int32(len(out))
		descs[i] = Descriptor{
			StorageType:    StorageUUID,
			PathOrInlineDv: path,
			Offset:         &off,
			SizeInBytes:    int32(len(data)),
			Cardinality:    int64(bm.GetCardinality()),
		}
		out = appendEntry(out, data)
	}
	return out, descs, nil
}

// Inline returns an inline ('i') descriptor for bm. Delta readers accept
// these but Spark only writes them in tests; prefer Write.
func Inline(bm *roaring64.Bitmap) (Descriptor, error) {
	data, err := SerializeBitmap(bm)
	if err != nil {
		return Descriptor{}, err
	}
	return Descriptor{
		StorageType:    StorageInline,
		PathOrInlineDv: Z85Encode(data),
		SizeInBytes:    int32(len(data)),
		Cardinality:    int64(bm.GetCardinality()),
	}, nil
}

// DecodeFileAt extracts and checks the DV at offset in a DV file's bytes and
// returns its bitmap data. wantSize < 0 skips the size check.
func DecodeFileAt(file []byte, offset int64, wantSize int64) ([]byte, error) {
	if len(file) < 1 {
		return nil, corrupt("empty DV file")
	}
	if file[0] != FileVersion {
		return nil, corrupt("unsupported DV file version %d", file[0])
	}
	if offset < 1 || offset > int64(len(file))-4 {
		return nil, corrupt("offset %d outside DV file of %d bytes", offset, len(file))
	}
	return decodeEntry(file[offset:], wantSize)
}

// decodeEntry decodes "size | data | crc" at the start of b.
func decodeEntry(b []byte, wantSize int64) ([]byte, error) {
	if len(b) < 4 {
		return nil, corrupt("DV entry truncated")
	}
	size := int64(binary.BigEndian.Uint32(b))
	if size > MaxSize {
		return nil, corrupt("DV declares %d bytes", size)
	}
	if wantSize >= 0 && size != wantSize {
		return nil, corrupt("DV size %d does not match descriptor sizeInBytes %d", size, wantSize)
	}
	if int64(len(b)) < 4+size+4 {
		return nil, corrupt("DV entry of %d bytes truncated (%d available)", size, len(b)-4)
	}
	data := b[4 : 4+size]
	want := binary.BigEndian.Uint32(b[4+size:])
	if got := crc32.ChecksumIEEE(data); got != want {
		return nil, corrupt("CRC mismatch: stored %08x, computed %08x", want, got)
	}
	return data, nil
}

// FS reads DV files. Paths are those returned by Descriptor.AbsolutePath.
type FS interface {
	ReadFile(ctx context.Context, path string) ([]byte, error)
}

// RangeFS is optionally implemented by an FS to read only part of a file
// (n bytes at off); Read uses it to avoid loading large shared DV files.
// It must return fewer than n bytes (not an error) only at end of file.
type RangeFS interface {
	FS
	ReadRange(ctx context.Context, path string, off, n int64) ([]byte, error)
}

// FSFunc adapts a function to FS.
type FSFunc func(ctx context.Context, path string) ([]byte, error)

// ReadFile implements FS.
func (f FSFunc) ReadFile(ctx context.Context, path string) ([]byte, error) { return f(ctx, path) }

// Read loads and decodes the deletion vector described by d. fsys may be nil
// for inline DVs. The result is checked against d.SizeInBytes (file DVs),
// the CRC and d.Cardinality.
func Read(ctx context.Context, fsys FS, tableRoot string, d *Descriptor) (*roaring64.Bitmap, error) {
	if d == nil {
		return roaring64.New(), nil
	}
	if d.SizeInBytes < 0 || d.Cardinality < 0 {
		return nil, corrupt("negative sizeInBytes/cardinality in descriptor %s", d.UniqueID())
	}
	var data []byte
	switch d.StorageType {
	case StorageInline:
		var err error
		data, err = Z85DecodeLen(d.PathOrInlineDv, int(d.SizeInBytes))
		if err != nil {
			return nil, fmt.Errorf("inline deletion vector: %w", err)
		}
	case StorageUUID, StorageAbsolute:
		if fsys == nil {
			return nil, errors.New("deletion vector: no file system to read " + d.UniqueID())
		}
		p, err := d.AbsolutePath(tableRoot)
		if err != nil {
			return nil, err
		}
		off := d.OffsetOrZero()
		if d.Offset == nil {
			off = 1
		}
		if rf, ok := fsys.(RangeFS); ok {
			if off < 1 {
				return nil, corrupt("offset %d in %s", off, p)
			}
			head, err := rf.ReadRange(ctx, p, 0, 1)
			if err != nil {
				return nil, fmt.Errorf("deletion vector %s: %w", p, err)
			}
			if len(head) != 1 || head[0] != FileVersion {
				return nil, fmt.Errorf("deletion vector %s: %w", p, corrupt("bad file version"))
			}
			entry, err := rf.ReadRange(ctx, p, off, 4+int64(d.SizeInBytes)+4)
			if err != nil {
				return nil, fmt.Errorf("deletion vector %s: %w", p, err)
			}
			data, err = decodeEntry(entry, int64(d.SizeInBytes))
			if err != nil {
				return nil, fmt.Errorf("deletion vector %s: %w", p, err)
			}
		} else {
			file, err := fsys.ReadFile(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("deletion vector %s: %w", p, err)
			}
			data, err = DecodeFileAt(file, off, int64(d.SizeInBytes))
			if err != nil {
				return nil, fmt.Errorf("deletion vector %s: %w", p, err)
			}
		}
	default:
		return nil, fmt.Errorf("deletion vector: unknown storage type %q", d.StorageType)
	}
	bm, err := DeserializeBitmap(data)
	if err != nil {
		return nil, fmt.Errorf("deletion vector %s: %w", d.UniqueID(), err)
	}
	if c := bm.GetCardinality(); c != uint64(d.Cardinality) {
		return nil, fmt.Errorf("deletion vector %s: %w", d.UniqueID(), corrupt("cardinality %d, descriptor says %d", c, d.Cardinality))
	}
	if d.MaxRowIndex != nil && !bm.IsEmpty() && bm.Maximum() > uint64(*d.MaxRowIndex) {
		return nil, fmt.Errorf("deletion vector %s: %w", d.UniqueID(), corrupt("row index %d above maxRowIndex %d", bm.Maximum(), *d.MaxRowIndex))
	}
	return bm, nil
}
