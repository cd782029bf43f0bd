"""Plain text helpers with no project imports."""
