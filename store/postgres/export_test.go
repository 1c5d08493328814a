package postgres

// Migration returns the SQL of schema version v, for the upgrade tests.
func Migration(v int) string { return migrations[v] }
