"""REST API of webhooks: the caller's own and those of the projects they lead."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import webhooks
from accounts.api_support import caller, not_found
from accounts.models import Webhook
from accounts.permissions import membership_of


class WebhookSerializer(serializers.ModelSerializer):
    project: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="The project whose hook it is; null: the caller's own.",
    )
    last_event = serializers.CharField(read_only=True, allow_null=True, default=None)
    last_state = serializers.CharField(
        read_only=True,
        allow_null=True,
        default=None,
        help_text="The latest delivery's state: pending (to be tried again), delivered, failed.",
    )
    last_status = serializers.IntegerField(
        read_only=True, allow_null=True, default=None, help_text="Its last HTTP status."
    )
    last_error = serializers.CharField(read_only=True, allow_null=True, default=None)
    last_attempt_at = serializers.DateTimeField(read_only=True, allow_null=True, default=None)

    class Meta:
        model = Webhook
        fields = [
            "id",
            "url",
            "project",
            "events",
            "format",
            "created_at",
            "disabled_at",
            "disabled_reason",
            "consecutive_failures",
            "last_event",
            "last_state",
            "last_status",
            "last_error",
            "last_attempt_at",
        ]
        read_only_fields = fields


class NewWebhookSerializer(WebhookSerializer):
    secret = serializers.SerializerMethodField(
        help_text="The signing secret: shown this once, never again (README, Webhooks)."
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields

    def get_secret(self, hook: Webhook) -> str:
        return self.context["secret"]


class WebhookCreateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=500, help_text="An http or https URL.")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=Webhook.Event.choices),
        allow_empty=False,
        help_text="What it hears of; a user's own hook only job.ended.",
    )
    format = serializers.ChoiceField(choices=Webhook.Format.choices, default="json")
    project = serializers.SlugField(
        required=False, help_text="A project you lead (PI or co-PI); left out: your own hook."
    )


def _hook_or_404(request: Request, pk: int) -> Webhook:
    hook = webhooks.webhooks_of(caller(request)).filter(pk=pk).first()
    if hook is None:
        raise not_found(f"webhook {pk}")
    return hook


class WebhookList(APIView):
    api_errors = {
        "post": {
            400: "invalid: the URL is refused (scheme, port, or an address that is not "
            "public), an event a user's hook cannot hear, or a project you are not in.",
            403: "permission_denied: only the project's PI or a co-PI registers its hooks.",
        }
    }

    @extend_schema(
        tags=["webhooks"],
        summary="Your webhooks and your projects' (never their secrets)",
        responses=WebhookSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        hooks = webhooks.webhooks_listed(caller(request))
        return Response(WebhookSerializer(hooks, many=True).data)

    @extend_schema(
        tags=["webhooks"],
        summary="Register a webhook; the answer shows its secret once",
        request=WebhookCreateSerializer,
        responses={201: NewWebhookSerializer},
    )
    def post(self, request: Request) -> Response:
        user = caller(request)
        serializer = WebhookCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = serializer.validated_data
        project = None
        if "project" in data:
            membership = membership_of(user, data["project"])
            if membership is None:
                raise exceptions.ValidationError(
                    {"project": [f"You are not a member of a project {data['project']!r}."]}
                )
            project = membership.project
        hook, secret = webhooks.webhook_create(
            actor=user,
            url=data["url"],
            events=data["events"],
            format=data["format"],
            project=project,
        )
        body = NewWebhookSerializer(hook, context={"secret": secret}).data
        return Response(body, status=status.HTTP_201_CREATED)


class WebhookDetail(APIView):
    @extend_schema(tags=["webhooks"], summary="Delete a webhook", responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        webhooks.webhook_delete(webhook=_hook_or_404(request, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookTestDeliveryResponse(serializers.Serializer):
    delivery = serializers.IntegerField(help_text="The test delivery's id.")


class WebhookTest(APIView):
    @extend_schema(
        tags=["webhooks"],
        summary="Send a test delivery (event ping); one that succeeds turns a disabled hook on",
        request=None,
        responses={202: WebhookTestDeliveryResponse},
    )
    def post(self, request: Request, pk: int) -> Response:
        delivery = webhooks.webhook_test_send(webhook=_hook_or_404(request, pk))
        return Response({"delivery": delivery.pk}, status=status.HTTP_202_ACCEPTED)
