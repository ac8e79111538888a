--- Suggestion state per buffer and the text logic both engines share: what the user typed since a
--- request (type-through), what is left of a suggestion, how much one accept-line / accept-word takes,
--- and putting accepted text into the buffer.
local api = vim.api

local M = {}

---@class codecue.Anchor
---@field row integer 0-based
---@field col integer 0-based byte column

---@class codecue.Request : codecue.Anchor
---@field id integer|nil         JSON-RPC id
---@field client_id integer
---@field position lsp.Position  as sent (the server's coordinates)
---@field version integer|nil    document version the server saw
---@field done boolean           the final response has arrived (or the request ended)
---@field cancelled boolean|nil  cancelled by us: its answer, if one still comes, is not shown

---@class codecue.Stream : codecue.Anchor
---@field text string            full text streamed so far, from the anchor
---@field request_id integer|string|nil

---@class codecue.BufState
---@field request codecue.Request|nil   latest inlineCompletion request for the buffer
---@field stream codecue.Stream|nil     streamed (or carried-over) text drawn as our ghost text
---@field items string[]|nil            final items of the latest answer
---@field anchor codecue.Anchor|nil     where those items start
---@field index integer                 which item is shown

---@type table<integer, codecue.BufState>
local states = {}

---@param bufnr integer
---@return codecue.BufState
function M.get(bufnr)
  local state = states[bufnr]
  if not state then
    state = { index = 1 }
    states[bufnr] = state
  end
  return state
end

---@param bufnr integer
function M.forget(bufnr)
  states[bufnr] = nil
end

--- Every buffer that has state.
---@return integer[]
function M.buffers()
  return vim.tbl_keys(states)
end

--- The cursor of the buffer's window as (0-based row, byte col), or nil if the buffer is not shown.
---@param bufnr integer
---@return integer|nil, integer|nil
function M.cursor(bufnr)
  local win = api.nvim_get_current_win()
  if api.nvim_win_get_buf(win) ~= bufnr then
    win = vim.fn.bufwinid(bufnr)
    if win == -1 then
      return nil, nil
    end
  end
  local pos = api.nvim_win_get_cursor(win)
  return pos[1] - 1, pos[2]
end

--- Text between the anchor and the cursor: what the user typed since the request. Nil when the cursor
--- is before the anchor or the anchor no longer exists.
---@param bufnr integer
---@param anchor codecue.Anchor
---@return string|nil
function M.typed_since(bufnr, anchor)
  local row, col = M.cursor(bufnr)
  if not row then
    return nil
  end
  if row < anchor.row or (row == anchor.row and col < anchor.col) or row - anchor.row > 200 then
    return nil
  end
  if anchor.row >= api.nvim_buf_line_count(bufnr) then
    return nil
  end
  local anchor_line = api.nvim_buf_get_lines(bufnr, anchor.row, anchor.row + 1, true)[1]
  if anchor.col > #anchor_line then
    return nil
  end
  local ok, lines = pcall(api.nvim_buf_get_text, bufnr, anchor.row, anchor.col, row, col, {})
  if not ok then
    return nil
  end
  return table.concat(lines, '\n')
end

--- What is left of `text` (a suggestion made at `anchor`) after what the user typed since: nil when the
--- typing went another way (the suggestion is stale), '' when it was typed in full.
---@param bufnr integer
---@param anchor codecue.Anchor
---@param text string
---@return string|nil
function M.remainder(bufnr, anchor, text)
  local typed = M.typed_since(bufnr, anchor)
  if typed == nil or text:sub(1, #typed) ~= typed then
    return nil
  end
  return text:sub(#typed + 1)
end

--- How much of `rest` one accept takes.
--- 'all': everything. 'line': up to the end of the current line; if `rest` starts with a line break,
--- that break and the next line. 'word': leading blanks and the next word, or the next run of
--- punctuation; at a line break, the break and the next line's indentation.
---@param rest string
---@param kind 'all'|'line'|'word'
---@return string
function M.take(rest, kind)
  if kind == 'all' or rest == '' then
    return rest
  end
  if kind == 'line' then
    local newline = rest:find('\n', 1, true)
    if newline == 1 then
      local next_newline = rest:find('\n', 2, true)
      return next_newline and rest:sub(1, next_newline - 1) or rest
    end
    return newline and rest:sub(1, newline - 1) or rest
  end
  local piece = rest:match('^\n[ \t]*') or rest:match('^[ \t]*[%w_]+') or rest:match('^[ \t]*[^%w_%s]+')
  return piece or rest:match('^%s+') or rest
end

--- Tell the server the user took `text` of a suggestion (`codecue/accepted`): it counts accepts per
--- language and context class, on this machine.
---@param bufnr integer
---@param kind 'all'|'line'|'word'
---@param text string
function M.report_accept(bufnr, kind, text)
  local client = require('codecue.server').client()
  if not client then
    return
  end
  require('codecue.compat').notify(client, 'codecue/accepted', {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    kind = kind == 'all' and 'whole' or kind,
    characters = vim.fn.strchars(text),
  })
end

--- Insert `text` at the cursor of the current window and put the cursor after it; with `kind`, an accept
--- (reported to the server).
---@param bufnr integer
---@param text string
---@param kind? 'all'|'line'|'word'
function M.insert(bufnr, text, kind)
  if text == '' then
    return
  end
  if kind then
    M.report_accept(bufnr, kind, text)
  end
  local row, col = M.cursor(bufnr)
  if not row then
    return
  end
  local lines = vim.split(text, '\n', { plain = true })
  api.nvim_buf_set_text(bufnr, row, col, row, col, lines)
  local end_row = row + #lines - 1
  local end_col = (#lines == 1 and col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { end_row + 1, end_col })
end

--- The buffer a document URI names, if loaded (never creates one).
---@param uri string
---@return integer|nil
function M.buffer_for_uri(uri)
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and vim.uri_from_bufnr(bufnr) == uri then
      return bufnr
    end
  end
  return nil
end

--- Does a partialCompletion notification belong to the buffer's latest request?
--- Matched on the request id, or on the position and version (a relaying daemon may renumber ids).
---@param request codecue.Request|nil
---@param params table
---@return boolean
function M.partial_matches(request, params)
  if not request or request.done then
    return false
  end
  if params.requestId ~= nil and params.requestId == request.id then
    return true
  end
  local position = params.position or {}
  return position.line == request.position.line
    and position.character == request.position.character
    and (params.version == nil or request.version == nil or params.version == request.version)
end

--- Tell listeners (statuslines, tests) what the ghost text now is.
---@param bufnr integer
---@param source 'stream'|'final'|'clear'
---@param text string
---@param done boolean|nil
---@param request_id integer|string|nil
function M.emit(bufnr, source, text, done, request_id)
  api.nvim_exec_autocmds('User', {
    pattern = 'CodeCueSuggestion',
    modeline = false,
    data = { bufnr = bufnr, source = source, text = text, done = done or false, request_id = request_id },
  })
end

return M
