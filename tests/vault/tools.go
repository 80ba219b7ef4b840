//go:build tools

// Keeps Vault's command package (and so every module `vault server -dev` needs) in this
// module's graph, so `go mod tidy` records them and `go build github.com/hashicorp/vault` works.
package tools

import (
	_ "github.com/hashicorp/vault/command"
)
