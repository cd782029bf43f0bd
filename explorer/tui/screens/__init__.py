"""The app's screens: main (search), note view, writing mode, key help."""
