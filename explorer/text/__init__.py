"""Plain text helpers with no project imports: tokenizing and folding words, terminal-safe text."""
