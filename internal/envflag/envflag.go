// Package envflag is command-line flags whose defaults come from
// environment variables: a flag overrides its variable, which overrides the
// built-in default, and every flag's usage names its variable, so that `-h`
// documents both ways of configuring a command.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Set is a flag.FlagSet whose flags read their defaults from the
// environment. Errors in the environment's values are reported by Parse.
type Set struct {
	*flag.FlagSet
	getenv func(string) string
	envs   map[string]string // flag name → its variable
	errs   []error
}

// New returns an empty Set that reports to output; -h prints the usage
// there and makes Parse return flag.ErrHelp.
func New(name string, getenv func(string) string, output io.Writer) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	return &Set{FlagSet: fs, getenv: getenv, envs: map[string]string{}}
}

func (s *Set) usage(usage, env string) string {
	if env == "" {
		return usage
	}
	return usage + " (" + env + ")"
}

// String defines a string flag defaulting to $env, or def.
func (s *Set) String(p *string, name, env, def, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		def = v
	}
	s.StringVar(p, name, def, s.usage(usage, env))
}

// Int defines an int flag defaulting to $env, or def.
func (s *Set) Int(p *int, name, env string, def int, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not a number", env, v))
		} else {
			def = n
		}
	}
	s.IntVar(p, name, def, s.usage(usage, env))
}

// Duration defines a duration flag defaulting to $env, or def.
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not a duration such as 10s", env, v))
		} else {
			def = d
		}
	}
	s.DurationVar(p, name, def, s.usage(usage, env))
}

// Int64 defines an int64 flag defaulting to $env, or def.
func (s *Set) Int64(p *int64, name, env string, def int64, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not a number", env, v))
		} else {
			def = n
		}
	}
	s.Int64Var(p, name, def, s.usage(usage, env))
}

// Float64 defines a float64 flag defaulting to $env, or def.
func (s *Set) Float64(p *float64, name, env string, def float64, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not a number", env, v))
		} else {
			def = f
		}
	}
	s.Float64Var(p, name, def, s.usage(usage, env))
}

// Bool defines a bool flag defaulting to $env, or def.
func (s *Set) Bool(p *bool, name, env string, def bool, usage string) {
	s.envs[name] = env
	if v := s.lookup(env); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not true or false", env, v))
		} else {
			def = b
		}
	}
	s.BoolVar(p, name, def, s.usage(usage, env))
}

// Given reports whether the flag name was set, on the command line or
// through its environment variable.
func (s *Set) Given(name string) bool {
	given := false
	s.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if f := s.Lookup(name); f != nil && !given {
		if env, ok := s.envs[name]; ok && s.lookup(env) != "" {
			given = true
		}
	}
	return given
}

func (s *Set) lookup(env string) string {
	if env == "" || s.getenv == nil {
		return ""
	}
	return s.getenv(env)
}

// Parse parses args (without the program name) and reports, besides the
// flags' errors, environment values that are not of their flag's type;
// like the flag package, it prints what it reports to the output.
// -h and -help return flag.ErrHelp once the usage is printed: a command
// exits 0 then. Arguments after the flags are left in Args.
func (s *Set) Parse(args []string) error {
	if err := s.FlagSet.Parse(args); err != nil {
		return err
	}
	if len(s.errs) > 0 {
		err := fmt.Errorf("%s: %w", s.Name(), errors.Join(s.errs...))
		fmt.Fprintln(s.Output(), err)
		return err
	}
	return nil
}
