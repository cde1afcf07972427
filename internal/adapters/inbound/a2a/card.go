package a2aagent

import "github.com/a2aproject/a2a-go/a2a"

// protocolVersion is the A2A protocol a2a-go v0.3.3 implements.
const protocolVersion = "0.3.0"

// SkillID names the agent's one skill.
const SkillID = "dispatch-http-request"

const skillDescription = "Send one HTTP request later, durably and at the destination's pace. " +
	"Send a message with exactly one data part shaped like Aquifer's POST /jobs body: " +
	"user_id (required), idempotent_key (required; the same user_id and key never make a second job), " +
	"url (absolute http/https) or pool_id, method (default GET), headers (object of strings), " +
	"body (string, sent verbatim) and optionally webhook_url. " +
	"The task is submitted while the job waits, working while Aquifer sends it (retrying 5xx and network errors), " +
	"then completed with the upstream's response as the artifact (response_status, body, content_type), " +
	"or failed with the reason. Cancel a task whose job has not been sent yet; push notifications report each state. " +
	"A duplicate user_id/idempotent_key is answered with a message naming the existing task."

const skillExample = `{"user_id":"agent-9","idempotent_key":"reset-42","url":"https://api.example.com/reset","method":"POST",` +
	`"headers":{"Content-Type":"application/json"},"body":"{\"account\":42}"}`

func newCard(base, version string) *a2a.AgentCard {
	return &a2a.AgentCard{
		Name: "Aquifer",
		Description: "Durable, rate-paced HTTP job queue: give it an HTTP request to send later; it stores it, " +
			"sends it at the pace the destination can take, and reports the response.",
		URL:                base + JSONRPCPath,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    protocolVersion,
		Version:            version,
		DefaultInputModes:  []string{"application/json"},
		DefaultOutputModes: []string{"application/json", "text/plain"},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, PushNotifications: true},
		Skills: []a2a.AgentSkill{{
			ID:          SkillID,
			Name:        "Dispatch HTTP request",
			Description: skillDescription,
			Tags:        []string{"http", "queue", "webhook", "rate-limit"},
			Examples:    []string{skillExample},
			InputModes:  []string{"application/json"},
			OutputModes: []string{"application/json", "text/plain"},
		}},
	}
}
