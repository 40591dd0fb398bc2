# ptyhub's shell integration for bash: the user's own startup files first, then marks for the
# prompt (OSC 133 A and B), the command line (OSC 633 E), the start of its output (133 C), its
# end with the exit code (133 D) and the working directory (OSC 7). PS0 marks a command's start,
# so no DEBUG trap is taken from the user.
command rm -rf -- "$PTYHUB_SHELL_DIR" 2>/dev/null
unset PTYHUB_SHELL_DIR
if [ -n "${PTYHUB_SHELL_LOGIN-}" ]; then
    unset PTYHUB_SHELL_LOGIN
    [ -r /etc/profile ] && . /etc/profile
    if [ -r ~/.bash_profile ]; then
        . ~/.bash_profile
    elif [ -r ~/.bash_login ]; then
        . ~/.bash_login
    elif [ -r ~/.profile ]; then
        . ~/.profile
    fi
else
    [ -r ~/.bashrc ] && . ~/.bashrc
fi

if [ -z "${__ptyhub_integrated-}" ]; then
    __ptyhub_integrated=1
    __ptyhub_running=
    __ptyhub_last_history=

    # The command line as history has it, escaped as OSC 633 wants it.
    __ptyhub_command_line() {
        local line number
        line=$(HISTTIMEFORMAT= builtin history 1)
        line=${line#"${line%%[![:space:]]*}"}
        number=${line%%[![:digit:]]*}
        if [ -z "$number" ] || [ "$number" = "$__ptyhub_last_history" ]; then
            # History is off or kept no new entry (ignorespace, ignoredups): no line to give.
            return
        fi
        line=${line#"$number"}
        line=${line#\*}
        line=${line#"${line%%[![:space:]]*}"}
        line=${line//\\/\\\\}
        line=${line//;/\\x3b}
        line=${line//$'\n'/\\x0a}
        line=${line//$'\r'/\\x0d}
        line=${line//$'\e'/\\x1b}
        line=${line//$'\a'/\\x07}
        printf '\e]633;E;%s\a' "$line"
    }

    __ptyhub_precmd() {
        local code=$?
        if [ -n "$__ptyhub_running" ]; then
            printf '\e]133;D;%s\a' "$code"
            __ptyhub_running=
        fi
        local number
        number=$(HISTTIMEFORMAT= builtin history 1)
        number=${number#"${number%%[![:space:]]*}"}
        __ptyhub_last_history=${number%%[![:digit:]]*}
        printf '\e]7;file://%s%s\a' "${HOSTNAME-}" "${PWD//%/%25}"
        return "$code"
    }

    # Last in PROMPT_COMMAND, so that a prompt set by another hook is marked too.
    __ptyhub_mark_prompt() {
        local code=$?
        case $PS1 in
        *'133;A'*) ;;
        *) PS1='\[\e]133;A\a\]'$PS1'\[\e]133;B\a\]' ;;
        esac
        case $PS0 in
        *'__ptyhub_command_line'*) ;;
        *) PS0='${__ptyhub_set[__ptyhub_running=1]}$(__ptyhub_command_line)\e]133;C\a'$PS0 ;;
        esac
        return "$code"
    }

    PROMPT_COMMAND="__ptyhub_precmd"$'\n'"${PROMPT_COMMAND:-}"$'\n'"__ptyhub_mark_prompt"
fi
