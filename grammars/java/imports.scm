; What a file imports: @module is the imported class or package (`a.b.C`, `a.b` for `a.b.*`).
(import_declaration (scoped_identifier) @module)
