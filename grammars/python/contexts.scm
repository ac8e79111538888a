; Context classes for Python. Capture names are context classes (see grammars/README.md).

(comment) @comment
(string) @string
(interpolation) @code

; A docstring is the first statement of a module, class or function when it is a string.
(module . (expression_statement (string) @docstring))
(class_definition body: (block . (expression_statement (string) @docstring)))
(function_definition body: (block . (expression_statement (string) @docstring)))

[(import_statement) (import_from_statement) (future_import_statement)] @import

(call arguments: (argument_list) @call_arguments)
(call arguments: (generator_expression) @call_arguments)

(type) @type_annotation

(block) @block
