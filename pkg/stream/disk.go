package stream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/restore"
)

// An instance's data directory (Config.DataDir; a service running several
// operators gives each <data>/<operator>, Config.ForOperator) holds:
//
//	state/          the Pebble store
//	snapshots/<n>/  a checkpoint's snapshot while it uploads
//	restored-from   RestoredMarker (restore.MarkerFile), while a restore
//	                is not yet fenced
//
// Only the runtime reads or writes them; RestoreSavepoint is how a tool
// puts a savepoint in place.

func stateDir(dataDir string) string { return filepath.Join(dataDir, "state") }

func snapshotDir(dataDir string, n uint64) string {
	return filepath.Join(dataDir, "snapshots", strconv.FormatUint(n, 10))
}

// RestoreSavepoint puts savepoint name into a new deployment's data
// directory, as a service running every operator of the pipeline lays it
// out (<dataDir>/<operator>): each operator's snapshot becomes its state,
// and a marker makes the instance fence its predecessors' generations when
// it starts. A savepoint of a scaled pipeline (several instances of one
// operator) is refused: `weir scale -from-savepoint` restores that into any
// layout. It returns the manifests restored.
func RestoreSavepoint(ctx context.Context, st *checkpoint.Store, name, dataDir string) ([]checkpoint.Manifest, error) {
	sp, err := st.Savepoint(ctx, name)
	if err != nil {
		return nil, err
	}
	perOp := map[string]int{}
	for inst := range sp.Manifests {
		op, _, _ := strings.Cut(inst, "/")
		if perOp[op]++; perOp[op] > 1 {
			return nil, fmt.Errorf("stream: savepoint %s holds several instances of operator %s: restore it with `weir scale -from-savepoint %s`, which gives each instance of any layout its key groups", name, op, name)
		}
	}
	var out []checkpoint.Manifest
	for _, key := range sp.Manifests {
		m, err := st.Manifest(ctx, key)
		if err != nil {
			return out, err
		}
		opDir := filepath.Join(dataDir, m.Operator)
		if _, err := os.Stat(stateDir(opDir)); err == nil {
			return out, fmt.Errorf("stream: %s already holds state: restore a savepoint into a new deployment's empty directory", stateDir(opDir))
		}
		if err := st.Download(ctx, m, stateDir(opDir)); err != nil {
			return out, err
		}
		// The instance fences its previous generations when it starts.
		if err := restore.WriteMarker(opDir, restore.Marker{Kind: restore.SavepointPlaced, Manifest: key}); err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}
