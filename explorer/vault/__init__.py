"""Read the vault: scan with ignore rules, parse notes, cut shards, watch for changes."""
