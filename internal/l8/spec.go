package l8

import _ "embed"

// Spec is the protocol written for receivers, in markdown; Aquifer serves it
// at GET /l8-spec.
//
//go:embed spec.md
var Spec []byte
