# ptyhub's shell integration for fish, run after the user's config (--init-command): marks for
# the prompt (OSC 133 A and B), the command line (OSC 633 E), the start of its output (133 C),
# its end with the exit code (133 D) and the working directory (OSC 7), from fish's own events.
command rm -rf -- $PTYHUB_SHELL_DIR 2>/dev/null
set -e PTYHUB_SHELL_DIR

if not set -q __ptyhub_integrated
    set -g __ptyhub_integrated 1

    function __ptyhub_preexec --on-event fish_preexec
        set -l line (string replace -a -- '\\' '\\\\' $argv[1])
        set line (string replace -a -- ';' '\\x3b' $line)
        set line (string join -- '\x0a' $line)
        printf '\e]633;E;%s\a\e]133;C\a' "$line"
        set -g __ptyhub_running 1
    end

    function __ptyhub_postexec --on-event fish_postexec
        set -l code $status
        if set -q __ptyhub_running
            printf '\e]133;D;%s\a' $code
            set -e __ptyhub_running
        end
    end

    function __ptyhub_status
        return $argv[1]
    end

    functions -c fish_prompt __ptyhub_user_prompt
    function fish_prompt
        set -l code $status
        printf '\e]7;file://%s%s\a\e]133;A\a' (prompt_hostname) (string replace -a -- '%' '%25' $PWD)
        __ptyhub_status $code
        __ptyhub_user_prompt
        printf '\e]133;B\a'
    end
end
