package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// waitJob returns job id once it is terminal, or as it is when wait ends,
// the caller gives up, or the server closes. It listens to the job's events
// rather than polling the store.
func (s *Server) waitJob(ctx context.Context, id domain.JobID, wait time.Duration) (*domain.Job, error) {
	if wait <= 0 {
		return s.core.Get(ctx, id)
	}
	j, sub, err := s.core.Subscribe(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() { sub.Close() }()
	if j.Status.Terminal() {
		return j, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return s.core.Get(ctx, id)
		case <-timer.C:
			return s.core.Get(ctx, id)
		case ev, ok := <-sub.C:
			if !ok {
				// We fell behind and were dropped: reload and resubscribe.
				sub.Close()
				if j, sub, err = s.core.Subscribe(ctx, id); err != nil {
					return nil, err
				}
				if j.Status.Terminal() {
					return j, nil
				}
				continue
			}
			if ev.Type.Terminal() {
				// The store holds the result before the event is published.
				return s.core.Get(ctx, id)
			}
		}
	}
}

const jobURIPrefix = "aquifer://jobs/"

func jobURI(id domain.JobID) string { return jobURIPrefix + string(id) }

func (s *Server) addResources() {
	s.sdk.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "aquifer-job",
		Title:       "Aquifer job",
		URITemplate: jobURIPrefix + "{job_id}",
		Description: "A job's current state as JSON, the same document aquifer_get_job returns (status, attempts, " +
			"and once finished the upstream's response or the failure reason).",
		MIMEType: "application/json",
	}, s.readJob)
}

func (s *Server) readJob(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, jobURIPrefix)
	if !ok || !domain.ValidJobID(id) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	j, err := s.core.Get(ctx, domain.JobID(id))
	if err != nil {
		if domain.CodeOf(err) == domain.CodeNotFound {
			return nil, sdk.ResourceNotFoundError(uri)
		}
		return nil, s.toolError("resources/read", err)
	}
	b, err := json.Marshal(httpkit.NewJobView(j))
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}
