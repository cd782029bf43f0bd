"""Writing: link suggestions for the paragraph at the cursor and the link scorer fitted on the vault's own links."""
