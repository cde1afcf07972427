package a2aagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/push"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Limits on push configs, so one task cannot grow without bound.
const (
	maxPushConfigsPerTask = 10
	maxPushConfigIDLen    = 256
	maxPushSecretLen      = 4096
)

// pushStore keeps each task's push-notification configs durably: one JSON
// file per task (<dir>/<task id>.json, mode 0600, in a 0700 directory),
// written to a temporary file, synced and renamed into place. The files are
// read once at start; memory mirrors them. A task's file goes when its last
// config is deleted or when its job no longer exists (see Agent.sweep).
type pushStore struct {
	dir string

	mu     sync.Mutex
	byTask map[a2a.TaskID]*pushRecord
}

// pushRecord is one task's file.
type pushRecord struct {
	Configs []*a2a.PushConfig `json:"configs"`
	// FinalPushed is the terminal state already pushed to the configs, so a
	// restart does not push it again.
	FinalPushed a2a.TaskState `json:"final_pushed,omitempty"`
}

var _ a2asrv.PushConfigStore = (*pushStore)(nil)

// openPushStore creates dir if needed and loads every task's configs.
func openPushStore(dir string) (*pushStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create push config directory: %w", err)
	}
	s := &pushStore{dir: dir, byTask: map[a2a.TaskID]*pushRecord{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read push config directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			_ = os.Remove(filepath.Join(dir, name)) // an interrupted write
			continue
		}
		tid := a2a.TaskID(strings.TrimSuffix(name, ".json"))
		if _, ok := jobIDOf(tid); !ok || !strings.HasSuffix(name, ".json") {
			continue // not ours
		}
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read push configs of task %s: %w", tid, err)
		}
		var rec pushRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("push configs of task %s (%s): %w", tid, filepath.Join(dir, name), err)
		}
		s.byTask[tid] = &rec
	}
	return s, nil
}

func (s *pushStore) path(tid a2a.TaskID) string { return filepath.Join(s.dir, string(tid)+".json") }

// Save adds or replaces config (by id) for task tid.
func (s *pushStore) Save(_ context.Context, tid a2a.TaskID, config *a2a.PushConfig) (*a2a.PushConfig, error) {
	if _, ok := jobIDOf(tid); !ok {
		return nil, a2a.ErrTaskNotFound
	}
	if err := validatePushConfig(config); err != nil {
		return nil, fmt.Errorf("%v: %w", err, a2a.ErrInvalidParams)
	}
	c := clonePushConfig(config)
	if c.ID == "" {
		c.ID = uuid.Must(uuid.NewV7()).String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.byTask[tid]
	next := &pushRecord{}
	if rec != nil {
		next.FinalPushed = rec.FinalPushed
		for _, old := range rec.Configs {
			if old.ID != c.ID {
				next.Configs = append(next.Configs, old)
			}
		}
	}
	if len(next.Configs) >= maxPushConfigsPerTask {
		return nil, fmt.Errorf("task %s already has %d push configs, the most allowed: %w", tid, maxPushConfigsPerTask, a2a.ErrInvalidParams)
	}
	next.Configs = append(next.Configs, c)
	if err := s.writeLocked(tid, next); err != nil {
		return nil, err
	}
	return clonePushConfig(c), nil
}

// Get returns one config of task tid.
func (s *pushStore) Get(_ context.Context, tid a2a.TaskID, configID string) (*a2a.PushConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.byTask[tid]; rec != nil {
		for _, c := range rec.Configs {
			if c.ID == configID {
				return clonePushConfig(c), nil
			}
		}
	}
	return nil, push.ErrPushConfigNotFound
}

// List returns the configs of task tid, oldest first.
func (s *pushStore) List(_ context.Context, tid a2a.TaskID) ([]*a2a.PushConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*a2a.PushConfig{}
	if rec := s.byTask[tid]; rec != nil {
		for _, c := range rec.Configs {
			out = append(out, clonePushConfig(c))
		}
	}
	return out, nil
}

// Delete removes one config of task tid; deleting a missing one is not an
// error.
func (s *pushStore) Delete(_ context.Context, tid a2a.TaskID, configID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.byTask[tid]
	if rec == nil {
		return nil
	}
	next := &pushRecord{FinalPushed: rec.FinalPushed}
	for _, c := range rec.Configs {
		if c.ID != configID {
			next.Configs = append(next.Configs, c)
		}
	}
	if len(next.Configs) == len(rec.Configs) {
		return nil
	}
	return s.writeLocked(tid, next)
}

// DeleteAll removes every config of task tid.
func (s *pushStore) DeleteAll(_ context.Context, tid a2a.TaskID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byTask[tid] == nil {
		return nil
	}
	return s.writeLocked(tid, nil)
}

// finalPushed returns the terminal state already pushed for tid, if any.
func (s *pushStore) finalPushed(tid a2a.TaskID) a2a.TaskState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.byTask[tid]; rec != nil {
		return rec.FinalPushed
	}
	return ""
}

// markFinal records that state, a terminal one, was pushed for tid.
func (s *pushStore) markFinal(tid a2a.TaskID, state a2a.TaskState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.byTask[tid]
	if rec == nil || rec.FinalPushed == state {
		return nil
	}
	next := &pushRecord{Configs: rec.Configs, FinalPushed: state}
	return s.writeLocked(tid, next)
}

// tasks returns the tasks that have configs, sorted.
func (s *pushStore) tasks() []a2a.TaskID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]a2a.TaskID, 0, len(s.byTask))
	for tid := range s.byTask {
		out = append(out, tid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// writeLocked makes rec task tid's durable state; a nil or empty rec
// removes the file. Memory changes only once the disk has.
func (s *pushStore) writeLocked(tid a2a.TaskID, rec *pushRecord) error {
	if rec == nil || len(rec.Configs) == 0 {
		if err := os.Remove(s.path(tid)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove push configs of task %s: %w", tid, err)
		}
		delete(s.byTask, tid)
		return syncDir(s.dir)
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, s.path(tid), raw); err != nil {
		return fmt.Errorf("store push configs of task %s: %w", tid, err)
	}
	s.byTask[tid] = rec
	return nil
}

func writeFileAtomic(dir, path string, data []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func validatePushConfig(c *a2a.PushConfig) error {
	if c == nil {
		return errors.New("push notification config is required")
	}
	if c.URL == "" {
		return errors.New("push notification url is required")
	}
	if err := domain.ValidateTargetURL("url", c.URL); err != nil {
		return fmt.Errorf("push notification %s", domain.PublicMessage(err))
	}
	if len(c.ID) > maxPushConfigIDLen {
		return fmt.Errorf("push notification config id is longer than %d bytes", maxPushConfigIDLen)
	}
	if len(c.Token) > maxPushSecretLen || (c.Auth != nil && len(c.Auth.Credentials) > maxPushSecretLen) {
		return fmt.Errorf("push notification token and credentials may be at most %d bytes", maxPushSecretLen)
	}
	return nil
}

func clonePushConfig(c *a2a.PushConfig) *a2a.PushConfig {
	out := *c
	if c.Auth != nil {
		auth := *c.Auth
		auth.Schemes = append([]string(nil), c.Auth.Schemes...)
		out.Auth = &auth
	}
	return &out
}

// pushSender sends a task's state to one push config with a2a-go's HTTP
// sender (one attempt; failures are logged, never fatal to the task) and
// records terminal pushes so they are not repeated after a restart.
type pushSender struct {
	http  *push.HTTPPushSender
	store *pushStore
	log   *zap.Logger
}

var _ a2asrv.PushSender = (*pushSender)(nil)

func (p *pushSender) SendPush(ctx context.Context, config *a2a.PushConfig, task *a2a.Task) error {
	_ = p.http.SendPush(ctx, config, task) // logs and swallows its own failures
	if task.Status.State.Terminal() {
		if err := p.store.markFinal(task.ID, task.Status.State); err != nil {
			// Not fatal: at worst the final state is pushed again after a restart.
			p.log.Warn("recording a final push failed", zap.String("task_id", string(task.ID)), zap.Error(err))
		}
	}
	return nil
}
