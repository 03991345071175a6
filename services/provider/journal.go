package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// journal is the provider's record on disk: one Effect per JSON line,
// appended and fsynced before the effect is answered, so a provider killed
// at any point restarts knowing every effect it may have answered for.
type journal struct {
	f    *os.File
	path string
	size int64 // bytes of whole lines: where the next line goes
}

// openJournal opens the journal at path, creating it if it is missing, and
// returns the effects it holds. A last line without its newline is a write
// the provider was killed in the middle of — never answered, so never
// performed as far as any client knows: it is ignored and cut off, so the
// next effect is appended after the last whole line. A whole line that is
// no effect is corruption, and an error.
func openJournal(path string) (*journal, []Effect, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("provider: journal: %w", err)
	}
	j := &journal{f: f, path: path}
	effects, err := j.load()
	if err == nil && errors.Is(statErr, os.ErrNotExist) {
		err = syncDir(filepath.Dir(path)) // the new file's name survives a crash of the machine too
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return j, effects, nil
}

// load reads the whole lines and cuts off a torn last one.
func (j *journal) load() ([]Effect, error) {
	b, err := io.ReadAll(j.f)
	if err != nil {
		return nil, fmt.Errorf("provider: journal %s: %w", j.path, err)
	}
	whole := bytes.LastIndexByte(b, '\n') + 1
	var effects []Effect
	for n, line := range bytes.SplitAfter(b[:whole], []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e Effect
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("provider: journal %s line %d is no effect: %w", j.path, n+1, err)
		}
		effects = append(effects, e)
	}
	j.size = int64(whole)
	if whole < len(b) {
		if err := j.cut(); err != nil {
			return nil, err
		}
	}
	return effects, nil
}

// append writes e as a line and syncs it to disk. A failed append is cut
// off again, leaving the journal as it was.
func (j *journal) append(e Effect) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("provider: journal: encode effect %d: %w", e.Seq, err)
	}
	line = append(line, '\n')
	if _, err := j.f.WriteAt(line, j.size); err != nil {
		return errors.Join(fmt.Errorf("provider: journal %s: %w", j.path, err), j.cut())
	}
	if err := j.f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("provider: journal %s: %w", j.path, err), j.cut())
	}
	j.size += int64(len(line))
	return nil
}

// cut truncates the journal to its whole lines.
func (j *journal) cut() error {
	if err := j.f.Truncate(j.size); err != nil {
		return fmt.Errorf("provider: journal %s: cut torn line: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("provider: journal %s: %w", j.path, err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("provider: journal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("provider: journal: sync %s: %w", dir, err)
	}
	return nil
}
