package checkpoint

import (
	"bufio"
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/minio/sio"
)

// Keys are the keys snapshot files are encrypted with before they leave
// the host, and their manifests authenticated with, by ID. The last key
// read is the current one, which new snapshots use; the others still open
// what they sealed, so a key can be rotated — a new one appended — while
// the snapshots of the old one are still restored, until they are
// collected and the old key can go.
//
// Each file is sealed with AES-256-GCM in 64 KiB packages (DARE 2.0,
// github.com/minio/sio: every package authenticated and numbered, the
// last one marked, so that a file cut short, reordered or altered does not
// open) under a key of its own, derived with HKDF-SHA256 from the named
// key, a random salt, the pipeline's name and the object's: a file moved
// to another object's name, or copied into another pipeline's bucket
// sealed with the same key file, does not open either.
//
// Each manifest carries an HMAC-SHA256 of its content under a key derived
// from the named key and the pipeline's name (Manifest.MAC): without the
// key, a manifest cannot be written that a store with keys reads. Such a
// store restores nothing else — a manifest without a MAC, or a file
// without a key ID, is refused (ErrUnsealed), never read as plaintext.
type Keys struct {
	byID    map[string][]byte
	current string
}

// KeyBytes is the size of a key: 256 bits.
const KeyBytes = 32

// ErrNoKey matches the error of a snapshot file sealed with a key this
// process was not given. It is not corruption: the snapshot is whole, and
// restoring an older one instead would lose state; the process stops.
var ErrNoKey = errors.New("checkpoint: no key to open the snapshot")

// ErrUnsealed matches the error of a store with keys reading a snapshot
// that is not sealed: a manifest without a MAC, or a file without a key
// ID. Such a snapshot was taken without keys, by a build before manifests
// were authenticated, or put there by someone who holds no key; it is
// refused rather than restored as plaintext. Like ErrNoKey it is not
// corruption, which would fall back to an older snapshot: the process
// stops with the reason.
var ErrUnsealed = errors.New("checkpoint: snapshot not sealed")

// ErrForged matches the error of a manifest whose MAC does not
// authenticate it under the key it names, or that is not where its
// content says it belongs (another pipeline, operator, instance or
// checkpoint): it was written by someone who does not hold the key. The
// process stops with the reason, as for ErrUnsealed.
var ErrForged = errors.New("checkpoint: manifest not authentic")

// ParseKeys reads keys, one per line: an ID, a space or a colon, and the
// key's 32 bytes in standard base64. Blank lines and lines starting with
// # are skipped. The last key is the current one.
func ParseKeys(text string) (*Keys, error) {
	k := &Keys{byID: map[string][]byte{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, " ")
		if !ok {
			id, b64, ok = strings.Cut(line, ":")
		}
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		if !ok || id == "" || strings.ContainsAny(id, " :/\n") {
			return nil, fmt.Errorf("checkpoint: key line %d: want an ID and a base64 key, separated by a space", n)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(key) != KeyBytes {
			return nil, fmt.Errorf("checkpoint: key %s (line %d): want %d bytes in base64 (openssl rand -base64 32)", id, n, KeyBytes)
		}
		if _, dup := k.byID[id]; dup {
			return nil, fmt.Errorf("checkpoint: key %s is given twice (line %d)", id, n)
		}
		k.byID[id], k.current = key, id
	}
	if k.current == "" {
		return nil, errors.New("checkpoint: no key in the key list")
	}
	return k, nil
}

// LoadKeys reads keys from a file (ParseKeys).
func LoadKeys(file string) (*Keys, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: keys: %w", err)
	}
	k, err := ParseKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	return k, nil
}

// NewKeyLine is a line for a key file: id and 32 random bytes.
func NewKeyLine(id string) (string, error) {
	key := make([]byte, KeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return id + " " + base64.StdEncoding.EncodeToString(key) + "\n", nil
}

// Current is the ID of the key new snapshots are sealed with.
func (k *Keys) Current() string { return k.current }

// Has reports whether k holds the key id.
func (k *Keys) Has(id string) bool { _, ok := k.byID[id]; return ok }

// sealMagic starts every sealed file, with the key ID and the salt after
// it on their own lines. Files of an earlier build start with
// sealMagic1: their keys were derived from the object's name alone.
const (
	sealMagic  = "weir-sealed-2\n"
	sealMagic1 = "weir-sealed-1\n"
)

// sealLead is the byte sealed in front of every file's content: DARE seals
// an empty stream as no package at all, which does not open; with it, an
// empty file is one authenticated package like any other.
const sealLead = 0x01

// objectKey derives the key of one object of pipeline's bucket from the
// named key.
func objectKey(key, salt []byte, pipeline, object string) ([]byte, error) {
	return hkdf.Key(sha256.New, key, salt, "weir checkpoint object\x00"+pipeline+"\x00"+object, KeyBytes)
}

// manifestMAC is the MAC of a manifest of pipeline with the content
// canonical under the key id, in hex.
func (k *Keys) manifestMAC(pipeline, id string, canonical []byte) (string, error) {
	key, err := hkdf.Key(sha256.New, k.byID[id], nil, "weir checkpoint manifest\x00"+pipeline, KeyBytes)
	if err != nil {
		return "", err
	}
	h := hmac.New(sha256.New, key)
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// seal returns a reader of r's bytes sealed with the current key, for the
// object named object in pipeline's bucket.
func (k *Keys) seal(r io.Reader, pipeline, object string) (io.Reader, error) {
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	key, err := objectKey(k.byID[k.current], salt, pipeline, object)
	if err != nil {
		return nil, err
	}
	enc, err := sio.EncryptReader(io.MultiReader(bytes.NewReader([]byte{sealLead}), r), sio.Config{MinVersion: sio.Version20, MaxVersion: sio.Version20,
		CipherSuites: []byte{sio.AES_256_GCM}, Key: key})
	if err != nil {
		return nil, err
	}
	header := sealMagic + k.current + "\n" + base64.StdEncoding.EncodeToString(salt) + "\n"
	return io.MultiReader(strings.NewReader(header), enc), nil
}

// open returns a reader of what the sealed bytes in r hold, object's in
// pipeline's bucket, which its manifest says key sealed. k may be nil, or
// lack the key: the file then fails with ErrNoKey. A header naming another
// key than the manifest is an altered file, and fails as such.
func (k *Keys) open(r io.Reader, pipeline, object, key string) (io.Reader, error) {
	if k == nil || !k.Has(key) {
		return nil, fmt.Errorf("%w: sealed with key %q, which this process was not given (-checkpoint-keys, WEIR_CHECKPOINT_KEYS)", ErrNoKey, key)
	}
	br := bufio.NewReader(r)
	magic := make([]byte, len(sealMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, []byte(sealMagic)) {
		if bytes.Equal(magic, []byte(sealMagic1)) {
			return nil, fmt.Errorf("was sealed by an earlier build, whose keys did not bind the pipeline, and does not open in this one")
		}
		return nil, fmt.Errorf("does not start as a sealed file does")
	}
	id, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("has no key ID")
	}
	id = strings.TrimSuffix(id, "\n")
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("has no salt")
	}
	salt, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(line, "\n"))
	if err != nil {
		return nil, fmt.Errorf("has a malformed salt")
	}
	if id != key {
		return nil, fmt.Errorf("names key %q in its header, its manifest %q", id, key)
	}
	okey, err := objectKey(k.byID[id], salt, pipeline, object)
	if err != nil {
		return nil, err
	}
	plain, err := sio.DecryptReader(br, sio.Config{MinVersion: sio.Version20, MaxVersion: sio.Version20,
		CipherSuites: []byte{sio.AES_256_GCM}, Key: okey})
	if err != nil {
		return nil, err
	}
	lead := make([]byte, 1)
	if _, err := io.ReadFull(plain, lead); err != nil {
		return nil, err
	}
	if lead[0] != sealLead {
		return nil, fmt.Errorf("opens to content that does not start as sealed content does")
	}
	return plain, nil
}

// sign sets m's MAC under the current key, which it records in m.
func (k *Keys) sign(m *Manifest) error {
	m.MACKey, m.MAC, m.Checksum = k.current, "", ""
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	canonical, err := manifestCanonical(raw, "checksum", "mac")
	if err != nil {
		return err
	}
	m.MAC, err = k.manifestMAC(m.Pipeline, m.MACKey, canonical)
	return err
}

// authentic checks that m, read as raw from the KV key stored, is a
// manifest of pipeline written by a holder of the key it names and
// stored where it belongs: every manifest a store with keys reads.
func (k *Keys) authentic(pipeline, stored string, raw []byte, m Manifest) error {
	if m.MAC == "" {
		return fmt.Errorf("%w: manifest %s has no MAC: it was taken without -checkpoint-keys, by a build before manifests were authenticated, or written by someone who holds no key; a process with keys restores only sealed snapshots (a pipeline that ran unsealed or under an earlier build starts sealed from new checkpoint buckets, or restores with the build and keys it was taken with)",
			ErrUnsealed, stored)
	}
	if !k.Has(m.MACKey) {
		return fmt.Errorf("%w: manifest %s is authenticated with key %q, which this process was not given (-checkpoint-keys, WEIR_CHECKPOINT_KEYS)", ErrNoKey, stored, m.MACKey)
	}
	canonical, err := manifestCanonical(raw, "checksum", "mac")
	if err != nil {
		return fmt.Errorf("%w: manifest %s: %v", ErrCorrupt, stored, err)
	}
	want, err := k.manifestMAC(pipeline, m.MACKey, canonical)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(want), []byte(m.MAC)) {
		return fmt.Errorf("%w: manifest %s does not authenticate under key %q of pipeline %s: it was altered, or written elsewhere, by someone who does not hold the key (or %q is not the key that sealed it)",
			ErrForged, stored, m.MACKey, pipeline, m.MACKey)
	}
	belongs := m.Key()
	if m.Savepoint != "" {
		belongs = SavepointKey(m.Savepoint, m.Operator, m.Instance)
	}
	if m.Pipeline != pipeline || stored != belongs {
		return fmt.Errorf("%w: manifest %s is pipeline %s's %s, copied here", ErrForged, stored, m.Pipeline, belongs)
	}
	for _, f := range m.Files {
		if f.Key == "" {
			return fmt.Errorf("%w: manifest %s lists file %s unsealed", ErrUnsealed, stored, f.Name)
		}
	}
	return nil
}
