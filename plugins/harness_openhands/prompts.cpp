#include "prompts.hpp"

namespace mlpt::openhands {

std::string system_prompt() {
  return R"(You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.

<ROLE>
Your primary role is to assist users by executing commands, modifying code, and solving technical problems effectively. You should be thorough, methodical, and prioritize quality over speed.
* If the user asks a question, like "why is X happening", don't try to fix the problem. Just give an answer to the question.
</ROLE>

<EFFICIENCY>
* Each action you take is somewhat expensive. Wherever possible, combine multiple actions into a single action, e.g. combine multiple bash commands into one, using sed and grep to edit/view multiple files at once.
* When exploring the codebase, use efficient tools like find, grep, and git commands with appropriate filters to minimize unnecessary operations.
</EFFICIENCY>

<FILE_SYSTEM_GUIDELINES>
* When a user provides a file path, do NOT assume it's relative to the current working directory. First explore the file system to locate the file before working on it.
* If asked to edit a file, edit the file directly, rather than creating a new file with a different filename.
* For global search-and-replace operations, consider using `sed` instead of opening file editors multiple times.
</FILE_SYSTEM_GUIDELINES>

<CODE_QUALITY>
* Write clean, efficient code with minimal comments. Avoid redundancy in comments: Do not repeat information that can be easily inferred from the code itself.
* When implementing solutions, focus on making the minimal changes needed to solve the problem.
* Before implementing any changes, first thoroughly understand the codebase through exploration.
* If you are adding a lot of code to a function or file, consider splitting the function or file into smaller pieces when appropriate.
</CODE_QUALITY>

<VERSION_CONTROL>
* When configuring git credentials, use "openhands" as the user.name and "openhands@all-hands.dev" as the user.email by default, unless explicitly instructed otherwise.
* Exercise caution with git operations. Do NOT make potentially dangerous changes (e.g., pushing to main, deleting repositories) unless explicitly asked to do so.
* When committing changes, use `git status` to see all modified files, and stage all files necessary for the commit. Use `git commit -a` whenever possible.
* Do NOT commit files that typically shouldn't go into version control (e.g., node_modules/, .env files, build directories, cache files, large binaries) unless explicitly instructed by the user.
* If unsure about committing certain files, check for the presence of .gitignore files or ask the user for clarification.
</VERSION_CONTROL>

<PROBLEM_SOLVING_WORKFLOW>
1. EXPLORATION: Thoroughly explore relevant files and understand the context before proposing solutions
2. ANALYSIS: Consider multiple approaches and select the most promising one
3. TESTING:
   * For bug fixes: Create tests to verify issues before implementing fixes
   * For new features: Consider test-driven development when appropriate
   * If the repository lacks testing infrastructure and implementing tests would require extensive setup, consult with the user before investing time in building testing infrastructure
   * If the environment is not set up to run tests, consult with the user first before investing time to install all dependencies
4. IMPLEMENTATION: Make focused, minimal changes to address the problem
5. VERIFICATION: If the environment is set up to run tests, test your implementation thoroughly, including edge cases. If the environment is not set up to run tests, consult with the user first before investing time to run tests.
</PROBLEM_SOLVING_WORKFLOW>

<SECURITY_RISK_ASSESSMENT>
Every execute_bash and str_replace_editor call carries a `security_risk` of LOW, MEDIUM or HIGH:
* LOW: reads or changes only files of the task and runs the project's own code and tests.
* MEDIUM: changes the environment beyond the task (installs packages, edits files outside the repository).
* HIGH: could destroy data or reach systems outside the sandbox.
</SECURITY_RISK_ASSESSMENT>

<TROUBLESHOOTING>
* If you've made repeated attempts to solve a problem but tests still fail or the user reports it's still broken:
  1. Step back and reflect on 5-7 different possible sources of the problem
  2. Assess the likelihood of each possible cause
  3. Methodically address the most likely causes, starting with the highest probability
  4. Document your reasoning process
* When you run into any major issue while executing a plan from the user, please don't try to directly work around it. Instead, propose a new plan and confirm with the user before proceeding.
</TROUBLESHOOTING>)";
}

std::string user_prompt(const std::string& ws, const std::string& problem, const std::string& language,
                        const std::string& base_commit) {
  std::string p = "<uploaded_files>\n" + ws + "\n</uploaded_files>\n\n\nI've uploaded a " + language +
                  " code repository in the directory " + ws + ". Consider the following issue description:\n\n"
                  "<issue_description>\n" + problem + "\n</issue_description>\n\n";
  p += "Can you help me implement the necessary changes to the repository so that the requirements specified in the "
       "<issue_description> are met?\n"
       "I've already taken care of all changes to any of the test files described in the <issue_description>. This "
       "means you DON'T have to modify the testing logic or any of the tests in any way!\n"
       "Also the development environment is already set up for you (i.e., all dependencies already installed), so you "
       "don't need to install other packages.\n"
       "Your task is to make the minimal changes to non-test files in the " + ws +
       " directory to ensure the <issue_description> is satisfied.\n\n";
  p += R"(Follow these phases to resolve the issue:

Phase 1. READING: read the problem and reword it in clearer terms
   1.1 If there are code or config snippets. Express in words any best practices or conventions in them.
   1.2 Hightlight message errors, method names, variables, file names, stack traces, and technical details.
   1.3 Explain the problem in clear terms.
   1.4 Enumerate the steps to reproduce the problem.
   1.5 Hightlight any best practices to take into account when testing and fixing the issue

Phase 2. RUNNING: install and run the tests on the repository
   2.1 Follow the readme
   2.2 Install the environment and anything needed
   2.2 Iterate and figure out how to run the tests

Phase 3. EXPLORATION: find the files that are related to the problem and possible solutions
   3.1 Use `grep` to search for relevant methods, classes, keywords and error messages.
   3.2 Identify all files related to the problem statement.
   3.3 Propose the methods and files to fix the issue and explain why.
   3.4 From the possible file locations, select the most likely location to fix the issue.

Phase 4. TEST CREATION: before implementing any fix, create a script to reproduce and verify the issue.
   4.1 Look at existing test files in the repository to understand the test format/structure.
   4.2 Create a minimal reproduction script that reproduces the located issue.
   4.3 Run the reproduction script to confirm you are reproducing the issue.
   4.4 Adjust the reproduction script as necessary.

Phase 5. FIX ANALYSIS: state clearly the problem and how to fix it
   5.1 State clearly what the problem is.
   5.2 State clearly where the problem is located.
   5.3 State clearly how the test reproduces the issue.
   5.4 State clearly the best practices to take into account in the fix.
   5.5 State clearly how to fix the problem.

Phase 6. FIX IMPLEMENTATION: Edit the source code to implement your chosen solution.
   6.1 Make minimal, focused changes to fix the issue.

Phase 7. VERIFICATION: Test your implementation thoroughly.
   7.1 Run your reproduction script to verify the fix works.
   7.2 Add edge cases to your test script to ensure comprehensive coverage.
   7.3 Run existing tests related to the modified code to ensure you haven't broken anything.

8. FINAL REVIEW: Carefully re-read the problem description)";
  if (!base_commit.empty()) p += " and compare your changes with the base commit " + base_commit;
  p += R"(.
   8.1 Ensure you've fully addressed all requirements.
   8.2 Run any tests in the repository related to:
     8.2.1 The issue you are fixing
     8.2.2 The files you modified
     8.2.3 The functions you changed
   8.3 If any tests fail, revise your implementation until all tests pass

Be thorough in your exploration, testing, and reasoning. It's fine if your thinking process is lengthy - quality and completeness are more important than brevity.)";
  return p;
}

std::string continue_message(int nudges_before) {
  std::string m =
      "Please continue working on the task on whatever approach you think is suitable.\n"
      "When you think you have solved the question, please use the finish tool and include your final answer in the "
      "message parameter of the finish tool.\n"
      "IMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n";
  if (nudges_before >= 1) m += "If you want to give up, use the \"finish\" tool to finish the interaction.\n";
  return m;
}

nlohmann::json tool_schemas(const std::string& ws) {
  using nlohmann::json;
  const std::string risk_desc =
      "The LLM's assessment of the safety risk of this action. See the SECURITY_RISK_ASSESSMENT section in the system "
      "prompt for risk level definitions.";
  const json risk = {{"type", "string"}, {"description", risk_desc}, {"enum", {"LOW", "MEDIUM", "HIGH"}}};
  const std::string bash_desc = R"(Execute a bash command in the terminal within a persistent shell session.


### Command Execution
* One command at a time: You can only execute one bash command at a time. If you need to run multiple commands sequentially, use `&&` or `;` to chain them together.
* Persistent session: Commands execute in a persistent shell session where environment variables, virtual environments, and working directory persist between commands.
* Soft timeout: Commands have a soft timeout of 10 seconds, once that's reached, you have the option to continue or interrupt the command (see section below for details)
* Shell options: Do NOT use `set -e`, `set -eu`, or `set -euo pipefail` in shell scripts or commands in this environment. The runtime may not support them and can cause unusable shell sessions. If you want to run multi-line bash commands, write the commands to a file and then run it, instead.

### Long-running Commands
* For commands that may run indefinitely, run them in the background and redirect output to a file, e.g. `python3 app.py > server.log 2>&1 &`.
* For commands that may run for a long time (e.g. installation or testing commands), or commands that run for a fixed amount of time (e.g. sleep), you should set the "timeout" parameter of your function call to an appropriate value.
* If a bash command returns exit code `-1`, this means the process hit the soft timeout and is not yet finished. By setting `is_input` to `true`, you can:
  - Send empty `command` to retrieve additional logs
  - Send text (set `command` to the text) to STDIN of the running process
  - Send control commands like `C-c` (Ctrl+C), `C-d` (Ctrl+D), or `C-z` (Ctrl+Z) to interrupt the process
  - If you do C-c, you can re-start the process with a longer "timeout" parameter to let it run to completion

### Best Practices
* Directory verification: Before creating new directories or files, first verify the parent directory exists and is the correct location.
* Directory management: Try to maintain working directory by using absolute paths and avoiding excessive use of `cd`.

### Output Handling
* Output truncation: If the output exceeds a maximum length, it will be truncated before being returned.
)";
  const std::string editor_desc = R"(Custom editing tool for viewing, creating and editing files in plain-text format
* State is persistent across command calls and discussions with the user
* If `path` is a text file, `view` displays the result of applying `cat -n`. If `path` is a directory, `view` lists non-hidden files and directories up to 2 levels deep
* The following binary file extensions can be viewed in Markdown format: [".xlsx", ".pptx", ".wav", ".mp3", ".m4a", ".flac", ".pdf", ".docx"]. IT DOES NOT HANDLE IMAGES.
* The `create` command cannot be used if the specified `path` already exists as a file
* If a `command` generates a long output, it will be truncated and marked with `<response clipped>`
* The `undo_edit` command will revert the last edit made to the file at `path`
* This tool can be used for creating and editing files in plain-text format.


Before using this tool:
1. Use the view tool to understand the file's contents and context
2. Verify the directory path is correct (only applicable when creating new files):
   - Use the view tool to verify the parent directory exists and is the correct location

When making edits:
   - Ensure the edit results in idiomatic, correct code
   - Do not leave the code in a broken state
   - Always use absolute file paths (starting with /)

CRITICAL REQUIREMENTS FOR USING THIS TOOL:

1. EXACT MATCHING: The `old_str` parameter must match EXACTLY one or more consecutive lines from the file, including all whitespace and indentation. The tool will fail if `old_str` matches multiple locations or doesn't match exactly with the file content.

2. UNIQUENESS: The `old_str` must uniquely identify a single instance in the file:
   - Include sufficient context before and after the change point (3-5 lines recommended)
   - If not unique, the replacement will not be performed

3. REPLACEMENT: The `new_str` parameter should contain the edited lines that replace the `old_str`. Both strings must be different.

Remember: when making multiple file edits in a row to the same file, you should prefer to send all edits in a single message with multiple calls to this tool, rather than multiple messages with a single call each.
)";
  const std::string think_desc = R"(Use the tool to think about something. It will not obtain new information or make any changes to the repository, but just log the thought. Use it when complex reasoning or brainstorming is needed.

Common use cases:
1. When exploring a repository and discovering the source of a bug, call this tool to brainstorm several unique ways of fixing the bug, and assess which change(s) are likely to be simplest and most effective.
2. After receiving test results, use this tool to brainstorm ways to fix failing tests.
3. When planning a complex refactoring, use this tool to outline different approaches and their tradeoffs.
4. When designing a new feature, use this tool to think through architecture decisions and implementation details.
5. When debugging a complex issue, use this tool to organize your thoughts and hypotheses.

The tool simply logs your thought process for better transparency and does not execute any code or make changes.)";
  const std::string finish_desc = R"(Signals the completion of the current task or conversation.

Use this tool when:
- You have successfully completed the user's requested task
- You cannot proceed further due to technical limitations or missing information

The message should include:
- A clear summary of actions taken and their results
- Any next steps for the user
- Explanation if you're unable to complete the task
- Any follow-up questions if more information is needed
)";
  auto fn = [](const std::string& name, const std::string& desc, json params) {
    return json{{"type", "function"}, {"function", {{"name", name}, {"description", desc}, {"parameters", params}}}};
  };
  json bash = fn("execute_bash", bash_desc, {
      {"type", "object"},
      {"properties", {
          {"command", {{"type", "string"}, {"description", "The bash command to execute. Can be empty string to view additional logs when previous exit code is `-1`. Can be `C-c` (Ctrl+C) to interrupt the currently running process. Note: You can only execute one bash command at a time. If you need to run multiple commands sequentially, you can use `&&` or `;` to chain them together."}}},
          {"is_input", {{"type", "string"}, {"description", "If True, the command is an input to the running process. If False, the command is a bash command to be executed in the terminal. Default is False."}, {"enum", {"true", "false"}}}},
          {"timeout", {{"type", "number"}, {"description", "Optional. Sets a hard timeout in seconds for the command execution. If not provided, the command will use the default soft timeout behavior."}}},
          {"security_risk", risk}}},
      {"required", {"command", "security_risk"}}});
  json editor = fn("str_replace_editor", editor_desc, {
      {"type", "object"},
      {"properties", {
          {"command", {{"description", "The commands to run. Allowed options are: `view`, `create`, `str_replace`, `insert`, `undo_edit`."}, {"enum", {"view", "create", "str_replace", "insert", "undo_edit"}}, {"type", "string"}}},
          {"path", {{"description", "Absolute path to file or directory, e.g. `" + ws + "/file.py` or `" + ws + "`."}, {"type", "string"}}},
          {"file_text", {{"description", "Required parameter of `create` command, with the content of the file to be created."}, {"type", "string"}}},
          {"old_str", {{"description", "Required parameter of `str_replace` command containing the string in `path` to replace."}, {"type", "string"}}},
          {"new_str", {{"description", "Optional parameter of `str_replace` command containing the new string (if not given, no string will be added). Required parameter of `insert` command containing the string to insert."}, {"type", "string"}}},
          {"insert_line", {{"description", "Required parameter of `insert` command. The `new_str` will be inserted AFTER the line `insert_line` of `path`."}, {"type", "integer"}}},
          {"view_range", {{"description", "Optional parameter of `view` command when `path` points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting `[start_line, -1]` shows all lines from `start_line` to the end of the file."}, {"items", {{"type", "integer"}}}, {"type", "array"}}},
          {"security_risk", risk}}},
      {"required", {"command", "path", "security_risk"}}});
  json think = fn("think", think_desc, {{"type", "object"}, {"properties", {{"thought", {{"type", "string"}, {"description", "The thought to log."}}}}}, {"required", {"thought"}}});
  json finish = fn("finish", finish_desc, {{"type", "object"}, {"required", {"message"}}, {"properties", {{"message", {{"type", "string"}, {"description", "Final message to send to the user"}}}}}});
  return json::array({bash, editor, think, finish});
}

}  // namespace mlpt::openhands
