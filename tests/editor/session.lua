-- A headless Neovim session with archspec's language server (init.lua beside this file), on a
-- spec with a typo (`mpl:`): it waits for the diagnostics, asks for completion on a line being
-- typed, asks for the code actions at the typo and applies the did-you-mean with
-- vim.lsp.buf.code_action() (its menu answered with the first choice), hovers on a param, and prints the fixed line and the
-- diagnostics after. Works on Neovim 0.7 (Debian's) and later.
--
--   nvim --headless -u tests/editor/init.lua -c 'luafile tests/editor/session.lua' tests/editor/typo.yaml
--
-- The log goes to $SESSION_LOG (default: stdout). Exits 0 when every step worked, else 1.
local out = vim.env.SESSION_LOG and io.open(vim.env.SESSION_LOG, "w") or io.stdout
local function say(text)
  out:write(text .. "\n")
  out:flush()
end
local function finish(ok)
  if out ~= io.stdout then
    out:close()
  end
  vim.cmd(ok and "qa!" or "cq!")
end

local buf = vim.api.nvim_get_current_buf()
local uri = vim.uri_from_bufnr(buf)
local TIMEOUT = 20000

say("neovim " .. tostring(vim.version().major) .. "." .. tostring(vim.version().minor) .. "."
  .. tostring(vim.version().patch) .. ", file " .. vim.api.nvim_buf_get_name(buf) .. ", filetype " .. vim.bo.filetype)
if not vim.wait(TIMEOUT, function() return #vim.diagnostic.get(buf) > 0 end, 50) then
  say("no diagnostics within 20 s")
  return finish(false)
end
local clients = vim.lsp.buf_get_clients(buf)
for _, client in pairs(clients) do
  say("server: " .. client.name .. " (" .. table.concat(client.config.cmd, " ") .. ")")
end
local diagnostics = vim.diagnostic.get(buf)
for _, d in ipairs(diagnostics) do
  say(string.format("diagnostic %d:%d: %s", d.lnum + 1, d.col + 1, d.message:gsub("\n", " | ")))
end

-- completion on a line being typed (the document does not parse while it is there), then undone
local function complete_typed(typed)
  local last = vim.api.nvim_buf_line_count(buf)
  vim.api.nvim_buf_set_lines(buf, last, last, false, { typed })
  local replies = vim.lsp.buf_request_sync(buf, "textDocument/completion",
    { textDocument = { uri = uri }, position = { line = last, character = #typed } }, TIMEOUT)
  local labels = {}
  for _, reply in pairs(replies or {}) do
    for _, item in ipairs((reply.result or {}).items or reply.result or {}) do
      table.insert(labels, item.label)
    end
  end
  say("typed: '" .. typed .. "' -> completion: " .. table.concat(labels, ", "))
  vim.api.nvim_buf_set_lines(buf, last, last + 1, false, {})
  return #labels > 0
end
local completed = complete_typed("  - att")
completed = complete_typed("  - attention: {kind: wi") and completed
completed = complete_typed("  - linear: {") and completed
completed = complete_typed("  - norm: {eps: ${w") and completed
completed = complete_typed("    from: ") and completed

-- the code actions at the typo, and the did-you-mean applied
local typo = diagnostics[1]
local range = { start = { line = typo.lnum, character = typo.col },
                ["end"] = { line = typo.end_lnum, character = typo.end_col } }
local context = { diagnostics = { { range = range, message = typo.message, severity = typo.severity } } }
replies = vim.lsp.buf_request_sync(buf, "textDocument/codeAction",
  { textDocument = { uri = uri }, range = range, context = context }, TIMEOUT)
for _, reply in pairs(replies or {}) do
  for _, action in ipairs(reply.result or {}) do
    say("code action offered: " .. action.title .. " (" .. tostring(action.kind) .. ")")
  end
end
-- as a user does: the cursor on the typo, :lua vim.lsp.buf.code_action(), the first choice
vim.ui.select = function(items, opts, on_choice)
  local item = items[1]
  local title = item and (item.title or (item[2] and item[2].title) or (item.action and item.action.title))
  say("chosen in vim.lsp.buf.code_action(): " .. tostring(title))
  on_choice(item, 1)
end
local before = vim.api.nvim_buf_get_lines(buf, typo.lnum, typo.lnum + 1, false)[1]
vim.api.nvim_win_set_cursor(0, { typo.lnum + 1, typo.col })
vim.lsp.buf.code_action()
local applied = vim.wait(TIMEOUT, function()
  return vim.api.nvim_buf_get_lines(buf, typo.lnum, typo.lnum + 1, false)[1] ~= before
end, 50)
if not applied then
  say("the code action changed nothing")
  return finish(false)
end
say("fixed line: " .. vim.api.nvim_buf_get_lines(buf, typo.lnum, typo.lnum + 1, false)[1])
local cleared = vim.wait(TIMEOUT, function() return #vim.diagnostic.get(buf) == 0 end, 50)
say("diagnostics after: " .. tostring(#vim.diagnostic.get(buf)))

-- hover on a param
replies = vim.lsp.buf_request_sync(buf, "textDocument/hover",
  { textDocument = { uri = uri }, position = { line = 3, character = 3 } }, TIMEOUT)
for _, reply in pairs(replies or {}) do
  if reply.result then
    say("hover on 'width': " .. reply.result.contents.value:gsub("\n+", " | "))
  end
end
finish(cleared and completed)
