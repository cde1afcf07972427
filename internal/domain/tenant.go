package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// tenantHeaders are the job headers whose value identifies the caller's
// credential at the upstream, in order of preference (BEHAVIOR.md §11.2).
var tenantHeaders = []string{"authorization", "x-api-key", "api-key"}

// APIKeyOf returns the job's upstream credential: the value of its
// Authorization header, else X-Api-Key, else Api-Key, matched
// case-insensitively; "" if it has none.
func APIKeyOf(headers map[string]string) string {
	for _, want := range tenantHeaders {
		for name, v := range headers {
			if strings.EqualFold(name, want) {
				return v
			}
		}
	}
	return ""
}

// TenantOf names the account queue of (user_id, credential) within an
// upstream: a hash, so the credential never appears in a lane name, and
// length-prefixed, so ("a:b", "c") and ("a", "b:c") stay apart.
func TenantOf(userID string, headers map[string]string) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(len(userID)) + ":" + userID + APIKeyOf(headers)))
	return hex.EncodeToString(sum[:12])
}
