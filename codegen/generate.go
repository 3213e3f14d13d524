package codegen

//go:generate go run ./internal/grammargen -o spirv_tables.go
