# ptyhub's shell integration for zsh, read as .zshrc from ptyhub's own ZDOTDIR: ZDOTDIR goes
# back to the user's, the user's .zshrc runs, then marks for the prompt (OSC 133 A and B), the
# command line (OSC 633 E), the start of its output (133 C), its end with the exit code
# (133 D) and the working directory (OSC 7), from precmd and preexec hooks.
ZDOTDIR=$PTYHUB_USER_ZDOTDIR
unset PTYHUB_USER_ZDOTDIR
command rm -rf -- "$PTYHUB_SHELL_DIR" 2>/dev/null
unset PTYHUB_SHELL_DIR
[[ -r $ZDOTDIR/.zshrc ]] && source "$ZDOTDIR/.zshrc"

if [[ -z ${__ptyhub_integrated-} ]]; then
    typeset -g __ptyhub_integrated=1 __ptyhub_running=

    __ptyhub_precmd() {
        local code=$?
        if [[ -n $__ptyhub_running ]]; then
            printf '\e]133;D;%s\a' "$code"
            __ptyhub_running=
        fi
        printf '\e]7;file://%s%s\a' "$HOST" "${PWD//\%/%25}"
        return $code
    }

    # Last of the precmd hooks, so that a prompt set by another hook is marked too.
    __ptyhub_mark_prompt() {
        if [[ $PS1 != *'133;A'* ]]; then
            PS1=$'%{\e]133;A\a%}'$PS1$'%{\e]133;B\a%}'
        fi
    }

    __ptyhub_preexec() {
        local line=$1
        line=${line//\\/\\\\}
        line=${line//;/\\x3b}
        line=${line//$'\n'/\\x0a}
        line=${line//$'\r'/\\x0d}
        line=${line//$'\e'/\\x1b}
        line=${line//$'\a'/\\x07}
        printf '\e]633;E;%s\a\e]133;C\a' "$line"
        __ptyhub_running=1
    }

    typeset -ga precmd_functions preexec_functions
    precmd_functions=(__ptyhub_precmd $precmd_functions __ptyhub_mark_prompt)
    preexec_functions+=(__ptyhub_preexec)
fi
