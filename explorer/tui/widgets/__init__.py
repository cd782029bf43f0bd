"""The app's widgets: search box, results list, context and why-ranked panes, vault tree, status bar."""
